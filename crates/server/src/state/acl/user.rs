//! A user: enabled or not, its passwords (SHA-256, as Redis stores them),
//! its root selector and any further selectors, the rules that change it
//! (Redis's `ACLSetUser`) and its description (`ACLDescribeUser`).

use sha2::{Digest, Sha256};

use super::catalog::Catalog;
use super::selector::{RuleError, Selector};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// `Some(true)`: sanitize-payload; `Some(false)`: skip-sanitize-payload
    /// (kept and described; combkv has no RESTORE to sanitize).
    pub sanitize: Option<bool>,
    /// Lowercase hex SHA-256 of each password, in the order added.
    pub passwords: Vec<String>,
    pub root: Selector,
    pub selectors: Vec<Selector>,
}

/// SHA-256 of `pass`, lowercase hex.
pub fn hash_password(pass: &[u8]) -> String {
    Sha256::digest(pass)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn valid_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl User {
    /// A new user: off, no password, nothing allowed (`ACLCreateUser`).
    pub fn new(name: &str, c: &Catalog) -> User {
        User {
            name: name.to_string(),
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            root: Selector::new(c),
            selectors: Vec::new(),
        }
    }

    /// The default user: on, no password, every command, key and channel.
    pub fn default_user(c: &Catalog) -> User {
        let mut u = User::new("default", c);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            u.apply(c, op).expect("the default user's rules are valid");
        }
        u
    }

    /// Applies one rule; an error names which of Redis's it is.
    pub fn apply(&mut self, c: &Catalog, op: &str) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let lower = op.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "skip-sanitize-payload" => self.sanitize = Some(false),
            "sanitize-payload" => self.sanitize = Some(true),
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "clearselectors" => self.selectors.clear(),
            "reset" => {
                for op in [
                    "resetpass",
                    "resetkeys",
                    "resetchannels",
                    "off",
                    "sanitize-payload",
                    "clearselectors",
                    "-@all",
                ] {
                    self.apply(c, op)?;
                }
            }
            _ if op.starts_with(['>', '#', '<', '!']) => {
                let (kind, rest) = op.split_at(1);
                let h = match kind {
                    ">" | "<" => hash_password(rest.as_bytes()),
                    _ if valid_hash(rest) => rest.to_string(),
                    _ => return Err(RuleError::BadHash),
                };
                if matches!(kind, ">" | "#") {
                    if !self.passwords.contains(&h) {
                        self.passwords.push(h);
                    }
                    self.nopass = false;
                } else {
                    let at = self
                        .passwords
                        .iter()
                        .position(|p| p == &h)
                        .ok_or(RuleError::NoSuchPassword)?;
                    self.passwords.remove(at);
                }
            }
            _ if op.starts_with('(') && op.ends_with(')') && op.len() >= 2 => {
                let mut s = Selector::new(c);
                for rule in op[1..op.len() - 1].split_whitespace() {
                    s.apply(c, rule)?;
                }
                self.selectors.push(s);
            }
            _ => self.root.apply(c, op)?,
        }
        Ok(())
    }

    /// Whether `pass` authenticates this user (enabled, and nopass or a
    /// matching password; compared without an early exit).
    pub fn accepts(&self, pass: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let h = hash_password(pass);
        let mut found = false;
        for p in &self.passwords {
            found |= p.bytes().zip(h.bytes()).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0;
        }
        found
    }

    /// Whether every selector check can be skipped: every command and key
    /// allowed by the root selector (the default user's usual state).
    pub fn unrestricted(&self) -> bool {
        self.root.allcommands && self.root.allkeys
    }

    /// The root selector first, then the others.
    pub fn all_selectors(&self) -> impl Iterator<Item = &Selector> {
        std::iter::once(&self.root).chain(self.selectors.iter())
    }

    /// The flags, in Redis's order (ACL GETUSER's `flags`).
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// The user's rules after `user <name> ` in ACL LIST and the ACL file.
    pub fn describe(&self, c: &Catalog) -> String {
        let mut out = String::new();
        for f in self.flags() {
            out.push_str(f);
            out.push(' ');
        }
        for p in &self.passwords {
            out.push_str(&format!("#{p} "));
        }
        out.push_str(&self.root.describe(c));
        for s in &self.selectors {
            out.push_str(&format!(" ({})", s.describe(c)));
        }
        out
    }
}

/// Joins a selector written over several arguments (`(+get`, `~x)`) into
/// one, as Redis's `ACLMergeSelectorArguments`. Err: the argument whose
/// parenthesis is not closed.
pub fn merge_selector_args(args: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, a) in args.iter().enumerate() {
        if let Some((start, mut sel)) = open.take() {
            sel.push(' ');
            sel.push_str(a);
            if a.ends_with(')') {
                out.push(sel);
            } else {
                open = Some((start, sel));
            }
            continue;
        }
        if a.starts_with('(') && !a.ends_with(')') {
            open = Some((i, a.clone()));
        } else {
            out.push(a.clone());
        }
    }
    match open {
        Some((start, _)) => Err(args[start].clone()),
        None => Ok(out),
    }
}
