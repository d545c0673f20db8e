//! [`redact_url`]: a server URL as errors, logs and reports may show it.

/// `scheme://user:***@host…` for `scheme://user:password@host…`; a URL without credentials as it
/// is. Every backend shows its server this way, so no password reaches a log or a report.
///
/// ```
/// assert_eq!(lock_core::redact_url("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(lock_core::redact_url("zk://h1:2181,h2:2181/locks"), "zk://h1:2181,h2:2181/locks");
/// ```
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..scheme + 3], &credentials[..colon], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("postgres://u:secret@h:1/db"), "postgres://u:***@h:1/db");
        assert_eq!(redact_url("mysql://u:p@ss@h/db"), "mysql://u:***@h/db");
        assert_eq!(redact_url("redis://:pw@h/"), "redis://:***@h/");
        assert_eq!(redact_url("postgres://h:1/db"), "postgres://h:1/db");
    }
}
