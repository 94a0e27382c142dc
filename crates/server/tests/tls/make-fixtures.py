#!/usr/bin/env python3
"""Writes the TLS tests' certificates and keys (test-only: the keys are public).

Run from this folder to make them again: `python3 make-fixtures.py` (needs the
`cryptography` package). The files are committed so the tests need nothing at run time:
  ca.pem                 the test CA (100 years)
  server.pem, server.key localhost and 127.0.0.1, signed by the CA
  server2.pem, .key      a second server certificate, for refresh_certs
  client.pem, .key       a client certificate signed by the CA (mutual TLS)
  rogue-ca.pem           another CA; rogue-client.pem/.key is signed by it
  expired.pem, .key      a server certificate that expired in 2021
"""
import datetime, ipaddress
from cryptography import x509
from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

def key():
    return ec.generate_private_key(ec.SECP256R1())

def write_key(k, path):
    open(path, "wb").write(k.private_bytes(serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

def write_cert(c, path):
    open(path, "wb").write(c.public_bytes(serialization.Encoding.PEM))

def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

def ca(cn):
    k = key()
    now = datetime.datetime(2024, 1, 1)
    c = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
         .public_key(k.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=36500))
         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
             key_encipherment=False, data_encipherment=False, key_agreement=False,
             key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
             critical=True)
         .sign(k, hashes.SHA256()))
    return k, c

def leaf(ca_key, ca_cert, cn, server, start, days):
    k = key()
    b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
         .public_key(k.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return k, b.sign(ca_key, hashes.SHA256())

valid_from = datetime.datetime(2024, 1, 1)
ca_key, ca_cert = ca("ferrocache test CA")
write_cert(ca_cert, "ca.pem")
for stem, cn, server in [("server", "localhost", True), ("server2", "localhost", True),
                         ("client", "ferrocache test client", False)]:
    k, c = leaf(ca_key, ca_cert, cn, server, valid_from, 36500)
    write_key(k, stem + ".key")
    write_cert(c, stem + ".pem")
k, c = leaf(ca_key, ca_cert, "localhost", True, datetime.datetime(2020, 1, 1), 365)
write_key(k, "expired.key")
write_cert(c, "expired.pem")
rogue_key, rogue_cert = ca("rogue CA")
write_cert(rogue_cert, "rogue-ca.pem")
k, c = leaf(rogue_key, rogue_cert, "rogue client", False, valid_from, 36500)
write_key(k, "rogue-client.key")
write_cert(c, "rogue-client.pem")
