//! API keys. Two roles: `admin` (writes, collection management, the UI) and `read` (search,
//! get, explain). A key is sent as `Authorization: Bearer KEY` or `X-API-Key: KEY` and compared
//! byte for byte: the whitespace HTTP allows around a header's value is not part of it (RFC
//! 9110 §5.5), every other byte is, so `Bearer  KEY` (two spaces) or a key with a space added
//! is invalid; configured keys may hold no whitespace at all. The comparison runs in
//! constant time (both sides hashed with SHA-256 first, so neither the content nor the
//! length of the key leaks through timing). Without a configured read key, reads are open;
//! without an admin key, so are writes (the configuration only allows that on loopback).

use axum::http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Reads.
    Read,
    /// Writes and management.
    Admin,
}

/// The configured keys, kept as digests.
#[derive(Clone)]
pub struct Keys {
    admin: Option<[u8; 32]>,
    read: Option<[u8; 32]>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("admin", &self.admin.is_some())
            .field("read", &self.read.is_some())
            .finish()
    }
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Constant-time equality of two digests.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Keys {
    /// Keys from the configuration.
    pub fn new(admin: Option<&str>, read: Option<&str>) -> Self {
        Keys {
            admin: admin.map(digest),
            read: read.map(digest),
        }
    }

    /// Checks a request's key for `role`: 401 without a (valid) key, 403 with a read key on an
    /// admin route.
    pub fn check(&self, headers: &HeaderMap, role: Role) -> Result<(), ApiError> {
        let open = match role {
            Role::Admin => self.admin.is_none(),
            // Reads stay open when only an admin key is set: the read key closes them.
            Role::Read => self.read.is_none(),
        };
        if open {
            return Ok(());
        }
        let Some(given) = presented(headers) else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing_key",
                "this route needs an API key: send `Authorization: Bearer KEY` (or `X-API-Key: KEY`)",
            ));
        };
        let given = digest(given);
        let is_admin = self.admin.is_some_and(|k| same(&k, &given));
        let is_read = self.read.is_some_and(|k| same(&k, &given));
        match role {
            Role::Admin if is_admin => Ok(()),
            Role::Admin if is_read => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the read key cannot write, export or manage collections; use the admin key",
            )),
            Role::Read if is_admin || is_read => Ok(()),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_key",
                "the API key is not valid: check KINDRED_ADMIN_KEY / KINDRED_READ_KEY on the server",
            )),
        }
    }
}

/// The key a request presents: `Authorization: Bearer KEY` (the scheme in any case, one space,
/// then the key), else `X-API-Key: KEY`; each value without the whitespace HTTP allows around
/// it, and nothing else trimmed. Another scheme (`Basic`, added by a proxy or a browser) does
/// not hide an `X-API-Key`.
fn presented(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, key) = v.trim_matches(OWS).split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(key)
        });
    bearer.or_else(|| {
        headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim_matches(OWS))
    })
}

/// HTTP's optional whitespace around a field value (RFC 9110 §5.6.3).
const OWS: &[char] = &[' ', '\t'];

#[cfg(test)]
mod tests {
    use super::*;

    fn with(header: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::HeaderName::from_bytes(header.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        h
    }

    #[test]
    fn roles_and_keys() {
        let admin = "a".repeat(20);
        let read = "r".repeat(20);
        let keys = Keys::new(Some(&admin), Some(&read));
        let none = HeaderMap::new();
        assert_eq!(keys.check(&none, Role::Read).unwrap_err().status, 401);
        let r = with("authorization", &format!("Bearer {read}"));
        assert!(keys.check(&r, Role::Read).is_ok());
        assert_eq!(keys.check(&r, Role::Admin).unwrap_err().status, 403);
        let a = with("x-api-key", &admin);
        assert!(keys.check(&a, Role::Admin).is_ok() && keys.check(&a, Role::Read).is_ok());
        let wrong = with("x-api-key", "nope");
        assert_eq!(
            keys.check(&wrong, Role::Admin).unwrap_err().code,
            "invalid_key"
        );
        // Only an admin key: reads open, writes closed.
        let keys = Keys::new(Some(&admin), None);
        assert!(keys.check(&none, Role::Read).is_ok());
        assert_eq!(keys.check(&none, Role::Admin).unwrap_err().status, 401);
        // No keys: everything open.
        assert!(Keys::new(None, None).check(&none, Role::Admin).is_ok());
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_basic_does_not_hide_x_api_key() {
        let admin = "a".repeat(20);
        let keys = Keys::new(Some(&admin), None);
        for scheme in ["bearer", "BEARER", "Bearer"] {
            let h = with("authorization", &format!("{scheme} {admin}"));
            assert!(keys.check(&h, Role::Admin).is_ok(), "{scheme}");
        }
        let mut h = with("authorization", "Basic dXNlcjpwYXNz");
        h.insert("x-api-key", admin.parse().unwrap());
        assert!(keys.check(&h, Role::Admin).is_ok());
    }

    /// One rule for whitespace: HTTP's own around a value is not part of it; any other
    /// whitespace is part of the key, so the key no longer matches (before: trimmed away).
    #[test]
    fn whitespace_is_part_of_the_key_except_around_the_header_value() {
        let admin = "a".repeat(20);
        let keys = Keys::new(Some(&admin), None);
        for ok in [
            ("authorization", format!("Bearer {admin}")),
            ("authorization", format!(" Bearer {admin}\t")),
            ("x-api-key", format!("  {admin} ")),
        ] {
            assert!(
                keys.check(&with(ok.0, &ok.1), Role::Admin).is_ok(),
                "{ok:?}"
            );
        }
        for bad in [
            ("authorization", format!("Bearer  {admin}")),
            ("authorization", format!("Bearer\t{admin}")),
            ("authorization", format!("Bearer {admin} x")),
            ("x-api-key", format!("{admin} x")),
            ("x-api-key", format!("{} {}", &admin[..10], &admin[10..])),
        ] {
            let e = keys.check(&with(bad.0, &bad.1), Role::Admin).unwrap_err();
            // A tab after `Bearer` is no Bearer value at all (`missing_key`).
            assert_eq!(e.status, StatusCode::UNAUTHORIZED, "{bad:?}");
        }
    }
}
