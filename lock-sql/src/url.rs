//! Database URLs in errors and `Debug` output, without their passwords.

/// `scheme://user:***@host…` for `scheme://user:password@host…`.
pub(crate) fn redact(url: &str) -> String {
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
        assert_eq!(redact("postgres://u:secret@h:1/db"), "postgres://u:***@h:1/db");
        assert_eq!(redact("mysql://u:p@ss@h/db"), "mysql://u:***@h/db");
        assert_eq!(redact("postgres://h:1/db"), "postgres://h:1/db");
    }
}
