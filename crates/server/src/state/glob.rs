//! Glob patterns as Redis's `stringmatchlen` reads them (KEYS, SCAN MATCH,
//! CONFIG GET): `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, and `\` escapes.

/// Recursion depth bound: a pattern of many stars cannot blow the stack or
/// take exponential time beyond this (Redis bounds it the same way).
const MAX_NESTING: usize = 1000;

pub(crate) fn matches(pattern: &[u8], s: &[u8]) -> bool {
    let mut skip_longer = false;
    match_at(pattern, s, false, &mut skip_longer, 0)
}

pub(crate) fn matches_nocase(pattern: &[u8], s: &[u8]) -> bool {
    let mut skip_longer = false;
    match_at(pattern, s, true, &mut skip_longer, 0)
}

fn eq(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

fn match_at(
    mut p: &[u8],
    mut s: &[u8],
    nocase: bool,
    skip_longer: &mut bool,
    depth: usize,
) -> bool {
    if depth > MAX_NESTING {
        return false;
    }
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if match_at(&p[1..], s, nocase, skip_longer, depth + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => {
                s = &s[1..];
            }
            b'[' => {
                p = &p[1..];
                let not = p.first() == Some(&b'^');
                if not {
                    p = &p[1..];
                }
                let hit;
                (hit, p) = class(p, s[0], nocase);
                if p.is_empty() {
                    // An unterminated class: Redis treats the end as `]`.
                    if not == hit {
                        return false;
                    }
                    s = &s[1..];
                    continue;
                }
                if not == hit {
                    return false;
                }
                s = &s[1..];
            }
            b'\\' if p.len() >= 2 => {
                p = &p[1..];
                if !eq(p[0], s[0], nocase) {
                    return false;
                }
                s = &s[1..];
            }
            c => {
                if !eq(c, s[0], nocase) {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = &p[1..];
        if s.is_empty() {
            while !p.is_empty() && p[0] == b'*' {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

/// Matches `c` against the body of a `[...]` class (after `[` and `^`):
/// whether it is in the class, and the pattern from the closing `]` on
/// (empty if the class is unterminated).
fn class(mut p: &[u8], c: u8, nocase: bool) -> (bool, &[u8]) {
    let mut hit = false;
    loop {
        if p.is_empty() {
            break;
        }
        if p[0] == b'\\' && p.len() >= 2 {
            p = &p[1..];
            if p[0] == c {
                hit = true;
            }
        } else if p[0] == b']' {
            break;
        } else if p.len() >= 3 && p[1] == b'-' {
            let (mut lo, mut hi) = (p[0], p[2]);
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            let (lo, hi, c) = if nocase {
                (
                    lo.to_ascii_lowercase(),
                    hi.to_ascii_lowercase(),
                    c.to_ascii_lowercase(),
                )
            } else {
                (lo, hi, c)
            };
            if c >= lo && c <= hi {
                hit = true;
            }
            p = &p[2..];
        } else if eq(p[0], c, nocase) {
            hit = true;
        }
        p = &p[1..];
    }
    (hit, p)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        assert!(matches(b"*", b"anything"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(!matches(b"h?llo", b"hllo"));
        assert!(matches(b"h*llo", b"heeeello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(!matches(b"h[a-b]llo", b"hcllo"));
        assert!(matches(b"h\\*llo", b"h*llo"));
        assert!(!matches(b"h\\*llo", b"hello"));
        assert!(matches(b"user:*:name", b"user:42:name"));
        assert!(!matches(b"a*b", b"acbd"));
        assert!(matches(b"*b*", b"abc"));
        assert!(!matches(b"abc", b"ab"));
        assert!(matches(b"ab*", b"ab"));
        assert!(!matches(b"", b"a"));
        assert!(super::matches_nocase(b"MAX*", b"maxmemory"));
        // Many stars on a non-matching string end quickly.
        let p = b"a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b";
        assert!(!matches(p, &[b'a'; 200]));
    }
}
