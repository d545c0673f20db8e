//! Server URLs: [`redact_url`] (as errors, logs and reports may show one) and [`UrlParts`] (the
//! pieces of a URL whose authority may list several hosts, which `url::Url` cannot parse).

use std::borrow::Cow;

use crate::error::{Error, Result};

/// `url` with every password replaced by `***`, in every form a backend accepts:
///
/// - URLs: `scheme://user:***@host…`, the userinfo ending at the last `@` of the authority (so a
///   password with a raw `@` is hidden whole);
///   a `password=` query parameter (`?password=***`) too;
/// - a password with a raw `/`, `?` or `#` (`redis://u:pa/ss@h/`, which RFC 3986 reads as host
///   `u`, port `pa`): an `@` after the authority hides all before it, so an `@` in a path or
///   query shows as `zk://***@b`, never a password;
/// - comma-separated lists of URLs (Redlock's nodes): each one;
/// - libpq `key=value` strings: `host=h password=***` (quoted values too);
/// - anything else with an `@` (`user:password@host`, no scheme): all before the last `@`.
///
/// Every backend shows its server this way, so no password reaches an error, a log or a report.
///
/// ```
/// use lock_core::redact_url;
/// assert_eq!(redact_url("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(redact_url("zk://h1:2181,h2:2181/locks"), "zk://h1:2181,h2:2181/locks");
/// assert_eq!(redact_url("host=h password='a b' user=u"), "host=h password=*** user=u");
/// ```
pub fn redact_url(url: &str) -> String {
    if !starts_with_scheme(url) {
        // libpq `key=value` (whose values may hold an `@` too), or `user:password@host`.
        return hide_before_last_at(&redact_key_values(url));
    }
    split_url_list(url).iter().map(|one| redact_one(one)).collect::<Vec<_>>().join(",")
}

/// Whether `text` starts with `scheme://` (RFC 3986: a letter, then letters, digits, `+`, `-`
/// or `.`); a `://` later on (in a query, say) makes no URL.
fn starts_with_scheme(text: &str) -> bool {
    text.split_once("://").is_some_and(|(scheme, _)| is_scheme(scheme))
}

fn is_scheme(text: &str) -> bool {
    text.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `text` with all before its last `@` (where a password may be) replaced by `***`.
fn hide_before_last_at(text: &str) -> String {
    text.rfind('@').map_or_else(|| text.to_owned(), |at| format!("***{}", &text[at..]))
}

/// `url` (`scheme://…?query#fragment`) without the query parameters whose key (decoded) `take`
/// accepts, the rest of the query and the fragment kept as written, and the parameters taken,
/// in order, form-decoded (`+` is a space), as drivers read the rest of the query. For
/// parameters a backend reads itself before its driver, which would refuse them (libpq's TLS
/// parameters, `pooler=`).
///
/// ```
/// let (rest, taken) =
///     lock_core::take_query_parameters("postgres://h/db?a=1&pooler=session#f", |key| key == "pooler").unwrap();
/// assert_eq!(rest, "postgres://h/db?a=1#f");
/// assert_eq!(taken, [("pooler".to_owned(), "session".to_owned())]);
/// ```
///
/// # Errors
/// [`Error::InvalidConfig`] for a taken value that is not UTF-8 once decoded (never showing the
/// URL, which may hold a password).
pub fn take_query_parameters(
    url: &str,
    take: impl Fn(&str) -> bool,
) -> Result<(String, Vec<(String, String)>)> {
    let (before_fragment, fragment) = url.split_once('#').map_or((url, None), |(u, f)| (u, Some(f)));
    let Some((base, query)) = before_fragment.split_once('?') else {
        return Ok((url.to_owned(), Vec::new()));
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = form_decode(key).unwrap_or_default();
        if !take(&key) {
            kept.push(pair);
            continue;
        }
        let value = form_decode(value).ok_or_else(|| {
            Error::invalid_config(format!("the URL's {key}= is not UTF-8 once percent-decoded"))
        })?;
        taken.push((key, value));
    }
    let mut rest = base.to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        rest.push('#');
        rest.push_str(fragment);
    }
    Ok((rest, taken))
}

/// A query's key or value, percent-decoded with `+` as a space; `None` if not UTF-8.
fn form_decode(text: &str) -> Option<String> {
    percent_encoding::percent_decode_str(&text.replace('+', " ")).decode_utf8().ok().map(Into::into)
}

/// A comma-separated list of URLs as its URLs; a comma not followed by another `scheme://` (a
/// ZooKeeper host list) stays inside its URL.
pub fn split_url_list(list: &str) -> Vec<&str> {
    let mut urls = Vec::new();
    let mut start = 0;
    for (comma, _) in list.match_indices(',') {
        let next = &list[comma + 1..];
        let scheme_end = next.find("://");
        let is_scheme = scheme_end.is_some_and(|end| is_scheme(&next[..end]));
        if is_scheme {
            urls.push(&list[start..comma]);
            start = comma + 1;
        }
    }
    urls.push(&list[start..]);
    urls
}

fn redact_one(url: &str) -> String {
    let Ok(parts) = UrlParts::split(url) else {
        return hide_before_last_at(url);
    };
    // Query passwords first: an `@` in the query (`?user=me@corp&password=…`) must not hide
    // the `password=` that follows it from the check.
    let rest = redact_query(parts.rest);
    let mut shown = format!("{}://", parts.scheme);
    if let Some(at) = rest.rfind('@') {
        // An `@` after the authority: in a root path or query (`zk://h:2181/a@b`), or ending a
        // password with a raw `/`, `?` or `#` (`u:12/34@h` reads as host `u`, port `12`). The
        // two cannot be told apart, so all before that `@` is hidden.
        shown.push_str("***");
        shown.push_str(&rest[at..]);
        return shown;
    }
    if let Some(userinfo) = parts.raw_userinfo {
        match userinfo.split_once(':') {
            Some((user, _)) => shown.push_str(&format!("{user}:***@")),
            None => shown.push_str(&format!("{userinfo}@")),
        }
    }
    shown.push_str(parts.hosts);
    shown.push_str(&rest);
    shown
}

/// The path, query and fragment `rest` with every password parameter's value replaced by `***`.
fn redact_query(rest: &str) -> String {
    let Some((path, query)) = rest.split_once('?') else { return rest.to_owned() };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if is_password_key(key) => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

fn is_password_key(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    key == "password" || key == "pass" || key == "pwd" || key.ends_with("password")
}

/// libpq `key=value key='quoted value'`: every password value replaced by `***`.
fn redact_key_values(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        // ASCII whitespace only, as libpq: byte offsets stay on character boundaries.
        let key_start =
            rest[..eq].trim_end().rfind(|c: char| c.is_ascii_whitespace()).map_or(0, |space| space + 1);
        let key = rest[key_start..eq].trim();
        let value = rest[eq + 1..].trim_start();
        let skipped = rest.len() - (eq + 1) - value.len();
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            // A quoted value ends at the first unescaped quote.
            let mut escaped = false;
            let end = quoted
                .char_indices()
                .find(|&(_, c)| {
                    let ends = c == '\'' && !escaped;
                    escaped = c == '\\' && !escaped;
                    ends
                })
                .map_or(quoted.len(), |(at, _)| at + 1);
            1 + end
        } else {
            value.find(|c: char| c.is_ascii_whitespace()).unwrap_or(value.len())
        };
        shown.push_str(&rest[..eq + 1 + skipped]);
        if is_password_key(key) {
            shown.push_str("***");
        } else {
            shown.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
    shown.push_str(rest);
    shown
}

/// The pieces of `scheme://[userinfo@]hosts[/path][?query]`, split as RFC 3986 says: the
/// authority ends at the first `/`, `?` or `#`, and its userinfo at the authority's *last* `@`
/// (so `zk://h:2181/a@b` has no userinfo, and an unencoded `@` in a password stays in it).
///
/// `url::Url` cannot parse a ZooKeeper ensemble (`h1:2181,h2:2181` is no host), so the authority
/// is split here; percent-decoding is `percent-encoding`'s.
#[derive(Clone, Copy)]
pub struct UrlParts<'a> {
    /// The scheme, without `://`.
    pub scheme: &'a str,
    /// The userinfo as written (percent-encoded), without its `@`.
    pub raw_userinfo: Option<&'a str>,
    /// The host list as written: `host[:port][,host[:port]…]`.
    pub hosts: &'a str,
    /// Everything after the authority: path, query and fragment (`""`, or starts with `/`, `?`
    /// or `#`).
    pub rest: &'a str,
}

impl<'a> UrlParts<'a> {
    /// Splits `url`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `url` has no `scheme://`.
    pub fn split(url: &'a str) -> Result<Self> {
        let (scheme, after) = url
            .split_once("://")
            .filter(|(scheme, _)| !scheme.is_empty())
            .ok_or_else(|| Error::invalid_config(format!("not a URL: {}", redact_url(url))))?;
        let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(authority_end);
        let (raw_userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        Ok(Self { scheme, raw_userinfo, hosts, rest })
    }

    /// The user name, percent-decoded; `None` without userinfo.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when it does not decode to UTF-8.
    pub fn user(&self) -> Result<Option<String>> {
        self.raw_userinfo
            .map(|userinfo| decode(userinfo.split_once(':').map_or(userinfo, |(user, _)| user), "user name"))
            .transpose()
    }

    /// The password, percent-decoded; `None` when the userinfo has no `:`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when it does not decode to UTF-8 (the error does not show it).
    pub fn password(&self) -> Result<Option<String>> {
        self.raw_userinfo
            .and_then(|userinfo| userinfo.split_once(':'))
            .map(|(_, password)| decode(password, "password"))
            .transpose()
    }

    /// The path (without query or fragment), percent-decoded; `""` when there is none.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when it does not decode to UTF-8.
    pub fn path(&self) -> Result<String> {
        let end = self.rest.find(['?', '#']).unwrap_or(self.rest.len());
        decode(&self.rest[..end], "path")
    }

    /// The query's `key=value` pairs, percent-decoded (`+` is a space).
    pub fn query(&self) -> Vec<(String, String)> {
        let Some((_, query)) = self.rest.split_once('?') else { return Vec::new() };
        let query = query.split_once('#').map_or(query, |(query, _)| query);
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                let decode = |text: &str| {
                    let spaced = text.replace('+', " ");
                    percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
                };
                (decode(key), decode(value))
            })
            .collect()
    }
}

impl std::fmt::Debug for UrlParts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The userinfo may hold a password: show the user only.
        f.debug_struct("UrlParts")
            .field("scheme", &self.scheme)
            .field("user", &self.raw_userinfo.map(|u| u.split_once(':').map_or(u, |(user, _)| user)))
            .field("hosts", &self.hosts)
            .field("rest", &self.rest)
            .finish()
    }
}

fn decode(text: &str, what: &str) -> Result<String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(Cow::into_owned)
        .map_err(|_| Error::invalid_config(format!("the URL's {what} is not UTF-8 once percent-decoded")))
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
        assert_eq!(redact_url("redis://u:a%40b%3Ac%2Fd@h/"), "redis://u:***@h/");
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=s3&x=1"),
            "postgres://h/db?user=u&password=***&x=1"
        );
        assert_eq!(redact_url("zk://h:2181/a@b"), "zk://***@b");
        assert_eq!(redact_url("zk://h:2181/locks"), "zk://h:2181/locks");
        assert_eq!(redact_url("redis://u:pa/ss@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact_url("redis://u:12/34@h:1/0?password=x"), "redis://***@h:1/0?password=***");
        assert_eq!(redact_url("redis://u:p?w#d@h:1/0"), "redis://***@h:1/0");
        assert_eq!(
            redact_url("postgres://h/db?user=me@corp&password=s3"),
            "postgres://***@corp&password=***"
        );
        assert_eq!(redact_url("app:hunter2@db:6379/?db=0"), "***@db:6379/?db=0");
        assert_eq!(redact_url("u:pw@h/?x=http://y"), "***@h/?x=http://y");
        // libpq splits at ASCII whitespace only; other whitespace neither splits nor panics.
        assert_eq!(redact_url("host=h password=ab\u{a0}cd"), "host=h password=***");
        let _ = redact_url("host=h\u{a0}password=x\u{a0}user=é");
        assert_eq!(redact_url("host=h user=me@corp password=s3"), "***@corp password=***");
        assert_eq!(redact_url("app:hunter2@db:6379"), "***@db:6379");
        assert_eq!(redact_url("db:6379"), "db:6379");
        assert_eq!(redact_url("zk://u:pw@h1:1,h2:2/root"), "zk://u:***@h1:1,h2:2/root");
        assert_eq!(redact_url("redis://:a@h1:1/,redis://:b@h2:2/"), "redis://:***@h1:1/,redis://:***@h2:2/");
        assert_eq!(redact_url("host=h password=s3 user=u"), "host=h password=*** user=u");
        assert_eq!(redact_url("host=h password = 'x y' dbname=d"), "host=h password = *** dbname=d");
        assert_eq!(redact_url("host=h password='a\\' b'"), "host=h password=***");
        assert_eq!(redact_url("plain"), "plain");
    }

    #[test]
    fn parts_split_at_the_authority_s_last_at_and_decode() {
        let parts = UrlParts::split("zk://u%40x:p%3A%2F@h1:1,h2:2/a@b?x=1").unwrap();
        assert_eq!(parts.hosts, "h1:1,h2:2");
        assert_eq!(parts.user().unwrap().as_deref(), Some("u@x"));
        assert_eq!(parts.password().unwrap().as_deref(), Some("p:/"));
        assert_eq!(parts.path().unwrap(), "/a@b");
        assert_eq!(parts.query(), [("x".to_owned(), "1".to_owned())]);
        let bare = UrlParts::split("zk://h:2181/a@b").unwrap();
        assert!(bare.raw_userinfo.is_none());
        assert_eq!(bare.hosts, "h:2181");
        assert!(!format!("{:?}", UrlParts::split("zk://u:hunter2@h").unwrap()).contains("hunter2"));
        assert!(UrlParts::split("h:2181").is_err());
    }

    #[test]
    fn lists_split_only_before_a_scheme() {
        assert_eq!(split_url_list("zk://h1:1,h2:2/r"), ["zk://h1:1,h2:2/r"]);
        assert_eq!(split_url_list("redis://h1/,redis://h2/"), ["redis://h1/", "redis://h2/"]);
    }
}
