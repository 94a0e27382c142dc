//! SASL PLAIN credentials for the binary protocol under `-S`: the password file
//! (memcached's `MEMCACHED_SASL_PWDB` format) and the check of one PLAIN message.

/// SASL PLAIN credentials, from a password file of `user:password` lines
/// (memcached's `MEMCACHED_SASL_PWDB` format).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sasl {
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Sasl {
    /// Read the password file at `path`.
    pub fn load(path: &std::path::Path) -> std::io::Result<Sasl> {
        Ok(Sasl::parse_pwdb(&std::fs::read(path)?))
    }

    /// Parse `user:password` lines; lines without a `:` are ignored, and the
    /// password is everything after the first `:` up to the line end.
    #[must_use]
    pub fn parse_pwdb(text: &[u8]) -> Sasl {
        let users = text
            .split(|&b| b == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
            .filter_map(|line| {
                let colon = line.iter().position(|&b| b == b':')?;
                Some((line[..colon].to_vec(), line[colon + 1..].to_vec()))
            })
            .filter(|(user, _)| !user.is_empty())
            .collect();
        Sasl { users }
    }

    /// Check a PLAIN message: `[authzid] NUL authcid NUL password`. An
    /// authorization id, when given, must name the same user.
    #[must_use]
    pub fn check_plain(&self, message: &[u8]) -> bool {
        let mut parts = message.splitn(3, |&b| b == 0);
        let (Some(authzid), Some(user), Some(password)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        if !authzid.is_empty() && authzid != user {
            return false;
        }
        self.users
            .iter()
            .any(|(u, p)| u.as_slice() == user && p.as_slice() == password)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_file_lines() {
        let db = Sasl::parse_pwdb(b"alice:secret\nbob:pa:ss\r\n\nnocolon\n:anon\n");
        assert!(db.check_plain(b"\0alice\0secret"));
        assert!(db.check_plain(b"alice\0alice\0secret"));
        assert!(db.check_plain(b"\0bob\0pa:ss"));
        assert!(!db.check_plain(b"\0alice\0wrong"));
        assert!(
            !db.check_plain(b"bob\0alice\0secret"),
            "authzid must be the user"
        );
        assert!(!db.check_plain(b"\0nocolon\0"));
        assert!(!db.check_plain(b"\0\0anon"));
        assert!(!db.check_plain(b"alice"));
    }
}
