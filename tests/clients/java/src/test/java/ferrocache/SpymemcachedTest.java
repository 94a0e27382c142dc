package ferrocache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.auth.AuthDescriptor;
import net.spy.memcached.auth.PlainCallbackHandler;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * spymemcached, in binary and in text mode, against the server at $CLIENT_TEST_SERVER
 * (host:port); SASL PLAIN against $CLIENT_TEST_SASL_SERVER (user:password@host:port, a
 * ferrocache started with -S) when set. scripts/test-clients starts the servers and runs
 * `mvn test` once against ferrocache and once against memcached.
 */
class SpymemcachedTest {
    private static final String SERVER = System.getenv("CLIENT_TEST_SERVER");
    private static final String SASL_SERVER = System.getenv("CLIENT_TEST_SASL_SERVER");
    private static final long TIMEOUT_MS = 5000;

    private static MemcachedClient connect(Protocol protocol, String server, AuthDescriptor auth)
            throws Exception {
        ConnectionFactoryBuilder builder = new ConnectionFactoryBuilder()
                .setProtocol(protocol)
                .setOpTimeout(TIMEOUT_MS);
        if (auth != null) {
            builder.setAuthDescriptor(auth);
        }
        return new MemcachedClient(builder.build(), AddrUtil.getAddresses(server));
    }

    private static MemcachedClient fresh(Protocol protocol) throws Exception {
        assumeTrue(SERVER != null, "CLIENT_TEST_SERVER not set: run scripts/test-clients");
        MemcachedClient mc = connect(protocol, SERVER, null);
        assertTrue(mc.flush().get(TIMEOUT_MS, TimeUnit.MILLISECONDS));
        return mc;
    }

    private static boolean ok(java.util.concurrent.Future<Boolean> f) throws Exception {
        return f.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class)
    void setGet(Protocol protocol) throws Exception {
        MemcachedClient mc = fresh(protocol);
        try {
            assertTrue(ok(mc.set("a", 0, "hello")));
            assertEquals("hello", mc.get("a"));
            assertNull(mc.get("missing"));
            // The transcoder keeps the type in the flags.
            assertTrue(ok(mc.set("i", 0, 42)));
            assertEquals(42, mc.get("i"));
            assertTrue(ok(mc.set("l", 0, List.of(1, 2, 3))));
            assertEquals(List.of(1, 2, 3), mc.get("l"));
            // Compressed by the transcoder over 16 KiB; random-looking bytes stay large.
            byte[] big = new byte[600_000];
            new java.util.Random(1).nextBytes(big);
            assertTrue(ok(mc.set("big", 0, big)));
            assertTrue(java.util.Arrays.equals(big, (byte[]) mc.get("big")));
        } finally {
            mc.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class)
    void multiGet(Protocol protocol) throws Exception {
        MemcachedClient mc = fresh(protocol);
        try {
            Map<String, Object> want = new HashMap<>();
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                String key = "k" + i;
                assertTrue(ok(mc.set(key, 0, "v" + key)));
                want.put(key, "v" + key);
                keys.add(key);
            }
            keys.add("missing");
            assertEquals(want, mc.getBulk(keys));
        } finally {
            mc.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class)
    void addReplaceAppendPrepend(Protocol protocol) throws Exception {
        MemcachedClient mc = fresh(protocol);
        try {
            assertTrue(ok(mc.add("a", 0, "1")));
            assertFalse(ok(mc.add("a", 0, "2")));
            assertFalse(ok(mc.replace("missing", 0, "2")));
            assertTrue(ok(mc.replace("a", 0, "3")));
            assertTrue(ok(mc.append(0, "a", "+")));
            assertTrue(ok(mc.prepend(0, "a", "-")));
            assertFalse(ok(mc.append(0, "missing", "+")));
            assertEquals("-3+", mc.get("a"));
        } finally {
            mc.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class)
    void delete(Protocol protocol) throws Exception {
        MemcachedClient mc = fresh(protocol);
        try {
            assertTrue(ok(mc.set("a", 0, "1")));
            assertTrue(ok(mc.delete("a")));
            assertFalse(ok(mc.delete("a")));
            assertNull(mc.get("a"));
        } finally {
            mc.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class)
    void incrDecr(Protocol protocol) throws Exception {
        MemcachedClient mc = fresh(protocol);
        try {
            assertEquals(-1, mc.incr("n", 1)); // a miss
            assertEquals(10, mc.incr("n", 1, 10)); // a miss with a default stores it
            assertEquals(15, mc.incr("n", 5));
            assertEquals(12, mc.decr("n", 3));
            assertEquals(0, mc.decr("n", 100));
            assertTrue(ok(mc.set("s", 0, "18446744073709551615")));
            assertEquals(0, mc.incr("s", 1)); // wraps at 2^64
        } finally {
            mc.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class)
    void getsCas(Protocol protocol) throws Exception {
        MemcachedClient mc = fresh(protocol);
        try {
            assertNull(mc.gets("missing"));
            assertEquals(CASResponse.NOT_FOUND, mc.cas("missing", 1, "x"));
            assertTrue(ok(mc.set("a", 0, "1")));
            CASValue<Object> first = mc.gets("a");
            assertEquals("1", first.getValue());
            assertEquals(CASResponse.OK, mc.cas("a", first.getCas(), "2"));
            // The token is spent.
            assertEquals(CASResponse.EXISTS, mc.cas("a", first.getCas(), "3"));
            CASValue<Object> second = mc.gets("a");
            assertEquals("2", second.getValue());
            assertNotEquals(first.getCas(), second.getCas());
            assertEquals(Map.of("a", "2"), mc.getBulk(List.of("a", "missing")));
        } finally {
            mc.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class)
    void touchStatsVersion(Protocol protocol) throws Exception {
        MemcachedClient mc = fresh(protocol);
        try {
            assertTrue(ok(mc.set("a", 0, "1")));
            assertTrue(ok(mc.touch("a", 100)));
            assertFalse(ok(mc.touch("missing", 100)));
            if (protocol == Protocol.BINARY) { // spymemcached has no text gat
                assertEquals("1", mc.getAndTouch("a", 100).getValue());
                assertNull(mc.getAndTouch("missing", 100));
            }
            Map<String, String> stats = mc.getStats().values().iterator().next();
            assertEquals("2", stats.get("threads"));
            assertTrue(mc.getVersions().values().iterator().next().startsWith("1.6.18"));
        } finally {
            mc.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = Protocol.class, names = "BINARY")
    void saslPlain(Protocol protocol) throws Exception {
        assumeTrue(SASL_SERVER != null, "CLIENT_TEST_SASL_SERVER not set");
        String[] parts = SASL_SERVER.split("@", 2);
        String[] credentials = parts[0].split(":", 2);
        AuthDescriptor auth = new AuthDescriptor(
                new String[] {"PLAIN"}, new PlainCallbackHandler(credentials[0], credentials[1]));
        MemcachedClient mc = connect(protocol, parts[1], auth);
        try {
            assertTrue(ok(mc.set("a", 0, "secret")));
            assertEquals("secret", mc.get("a"));
        } finally {
            mc.shutdown();
        }
    }
}
