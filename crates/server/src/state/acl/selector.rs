//! A selector: which commands, keys and channels it allows, as Redis 7
//! keeps them (a bit per command and subcommand, key patterns with read
//! and write flags, channel patterns), the rules that change it, and its
//! description in the same rules (ACL LIST, ACL GETUSER, the ACL file).

use std::collections::BTreeMap;

use super::catalog::{CATEGORIES, Catalog, category};
use crate::state::glob;

/// A key pattern's permission bits.
pub const READ: u8 = 1;
pub const WRITE: u8 = 2;
const ALL: u8 = READ | WRITE;

/// Why a rule was refused: Redis's `ACLSetUserStringError` cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    Unknown,
    Syntax,
    AfterAllKeys,
    AfterAllChannels,
    NoSuchPassword,
    BadHash,
    SubcommandFirstArg,
}

impl RuleError {
    pub fn text(self) -> &'static str {
        match self {
            RuleError::Unknown => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::AfterAllKeys => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and \
                 does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::AfterAllChannels => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid \
                 and does not have any effect. Try 'resetchannels' to start with an empty list \
                 of channels"
            }
            RuleError::NoSuchPassword => {
                "The password you are trying to remove from the user does not exist"
            }
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase \
                 hexadecimal characters"
            }
            RuleError::SubcommandFirstArg => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// A bit per catalog id.
    allowed: Vec<u64>,
    /// Redis's reserved "future commands" bit: set by `+@all` only.
    future: bool,
    /// Every command allowed (cleared by any command denied).
    pub allcommands: bool,
    /// `+cmd|arg` of commands without subcommands: first arguments
    /// allowed although the command is not.
    first_args: BTreeMap<usize, Vec<String>>,
    pub allkeys: bool,
    /// (READ/WRITE bits, glob) in the order added.
    pub patterns: Vec<(u8, String)>,
    pub allchannels: bool,
    pub channels: Vec<String>,
}

fn has_spaces(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_whitespace() || b == 0)
}

impl Selector {
    /// An empty selector: nothing allowed.
    pub fn new(catalog: &Catalog) -> Selector {
        Selector {
            allowed: vec![0; catalog.len().div_ceil(64)],
            ..Selector::default()
        }
    }

    fn bit(&self, id: usize) -> bool {
        self.allowed
            .get(id / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if let Some(w) = self.allowed.get_mut(id / 64) {
            if on {
                *w |= 1 << (id % 64);
            } else {
                *w &= !(1 << (id % 64));
                self.allcommands = false;
            }
        }
    }

    /// Allows or denies a command and its subcommands.
    fn change(&mut self, c: &Catalog, id: usize, on: bool) {
        self.set_bit(id, on);
        self.first_args.remove(&id);
        for &s in &c.subs[id] {
            self.set_bit(s, on);
        }
    }

    fn change_category(&mut self, c: &Catalog, bit: u32, on: bool) {
        for id in 0..c.len() {
            if c.cats[id] & bit != 0 {
                self.change(c, id, on);
            }
        }
    }

    fn all(&mut self, c: &Catalog, on: bool) {
        let fill = if on { u64::MAX } else { 0 };
        self.allowed = vec![fill; c.len().div_ceil(64)];
        self.future = on;
        self.allcommands = on;
        self.first_args.clear();
    }

    /// Applies one rule (Redis's `ACLSetSelector`).
    pub fn apply(&mut self, c: &Catalog, op: &str) -> Result<(), RuleError> {
        let lower = op.to_ascii_lowercase();
        match lower.as_str() {
            "allkeys" | "~*" => {
                self.allkeys = true;
                self.patterns.clear();
            }
            "resetkeys" => {
                self.allkeys = false;
                self.patterns.clear();
            }
            "allchannels" | "&*" => {
                self.allchannels = true;
                self.channels.clear();
            }
            "resetchannels" => {
                self.allchannels = false;
                self.channels.clear();
            }
            "allcommands" | "+@all" => self.all(c, true),
            "nocommands" | "-@all" => self.all(c, false),
            _ if op.starts_with('~') || op.starts_with('%') => self.key_pattern(op)?,
            _ if op.starts_with('&') => {
                if self.allchannels {
                    return Err(RuleError::AfterAllChannels);
                }
                if has_spaces(&op[1..]) {
                    return Err(RuleError::Syntax);
                }
                if !self.channels.iter().any(|p| p == &op[1..]) {
                    self.channels.push(op[1..].to_string());
                }
            }
            _ if lower.starts_with("+@") || lower.starts_with("-@") => {
                let bit = category(&lower[2..]).ok_or(RuleError::Unknown)?;
                self.change_category(c, bit, lower.starts_with('+'));
            }
            _ if lower.starts_with('+') => self.allow(c, &lower[1..], &op[1..])?,
            _ if lower.starts_with('-') => {
                let id = c.id(&lower[1..]).ok_or(RuleError::Unknown)?;
                self.change(c, id, false);
            }
            _ => return Err(RuleError::Syntax),
        }
        Ok(())
    }

    fn key_pattern(&mut self, op: &str) -> Result<(), RuleError> {
        if self.allkeys {
            return Err(RuleError::AfterAllKeys);
        }
        let b = op.as_bytes();
        let (mut flags, mut offset) = (0u8, 1);
        if b[0] == b'%' {
            loop {
                match b.get(offset).map(u8::to_ascii_uppercase) {
                    Some(b'R') if flags & READ == 0 => flags |= READ,
                    Some(b'W') if flags & WRITE == 0 => flags |= WRITE,
                    Some(b'~') => {
                        offset += 1;
                        break;
                    }
                    _ => return Err(RuleError::Syntax),
                }
                offset += 1;
            }
            if flags == 0 {
                return Err(RuleError::Syntax);
            }
        } else {
            flags = ALL;
        }
        let pattern = &op[offset..];
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.patterns.iter_mut().find(|(_, p)| p == pattern) {
            Some(existing) => existing.0 |= flags,
            None => self.patterns.push((flags, pattern.to_string())),
        }
        self.allkeys = false;
        // `%R~*` and `%W~*` together are `~*`, which is written back as
        // `~*` and read as allkeys: make it that now, so that a described
        // user reads back as the same user (Redis 7.0 writes an ACL file it
        // then refuses to load here).
        if self.patterns.iter().any(|(f, p)| *f == ALL && p == "*") {
            self.allkeys = true;
            self.patterns.clear();
        }
        Ok(())
    }

    /// `+cmd`, `+cmd|sub`, or `+cmd|firstarg` of a command without
    /// subcommands.
    fn allow(&mut self, c: &Catalog, lower: &str, raw: &str) -> Result<(), RuleError> {
        let Some((cmd, sub)) = lower.rsplit_once('|') else {
            let id = c.id(lower).ok_or(RuleError::Unknown)?;
            self.change(c, id, true);
            return Ok(());
        };
        let id = c.id(cmd).ok_or(RuleError::Unknown)?;
        if c.parent[id].is_some() {
            return Err(RuleError::SubcommandFirstArg);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !c.subs[id].is_empty() {
            let sub_id = c.id(lower).ok_or(RuleError::Unknown)?;
            self.change(c, sub_id, true);
        } else {
            let arg = raw.rsplit_once('|').map_or(sub, |(_, a)| a).to_string();
            let list = self.first_args.entry(id).or_default();
            if !list.iter().any(|a| a.eq_ignore_ascii_case(&arg)) {
                list.push(arg);
            }
        }
        Ok(())
    }

    /// Whether the command `id` may run with `first_arg` (its argument
    /// after the name, or after the subcommand's name).
    pub fn allows_command(&self, id: usize, first_arg: Option<&[u8]>) -> bool {
        if self.allcommands || self.bit(id) {
            return true;
        }
        match (self.first_args.get(&id), first_arg) {
            (Some(list), Some(arg)) => list.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(arg)),
            _ => false,
        }
    }

    /// Whether a key may be used with `need` (READ and/or WRITE bits).
    pub fn allows_key(&self, key: &[u8], need: u8) -> bool {
        self.allkeys
            || self
                .patterns
                .iter()
                .any(|(f, p)| f & need == need && glob::matches(p.as_bytes(), key))
    }

    /// The patterns granting `need`, for checks of ranges of keys.
    pub fn key_patterns(&self, need: u8) -> impl Iterator<Item = &str> {
        self.patterns
            .iter()
            .filter(move |(f, _)| f & need == need)
            .map(|(_, p)| p.as_str())
    }

    /// Keys, channels and command rules, as ACL LIST writes them.
    pub fn describe(&self, c: &Catalog) -> String {
        let mut out = String::new();
        if self.allkeys {
            out.push_str("~* ");
        } else {
            for p in &self.patterns {
                out.push_str(&pattern_text(p));
                out.push(' ');
            }
        }
        if self.allchannels {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            for ch in &self.channels {
                out.push_str(&format!("&{ch} "));
            }
        }
        out.push_str(&self.command_rules(c));
        out
    }

    /// ACL GETUSER's `keys`: the patterns, space-separated.
    pub fn keys_text(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        self.patterns
            .iter()
            .map(pattern_text)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// ACL GETUSER's `channels`.
    pub fn channels_text(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        self.channels
            .iter()
            .map(|c| format!("&{c}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The command rules that rebuild this selector's command bits,
    /// Redis's `ACLDescribeSelectorCommandRules`: `+@all` or `-@all`, the
    /// categories that fit best, then single commands in catalog order.
    pub fn command_rules(&self, c: &Catalog) -> String {
        let additive = !self.future;
        let mut rules = vec![if additive { "-@all" } else { "+@all" }.to_string()];
        let mut fake = Selector::new(c);
        fake.all(c, !additive);
        let mut temp = self.clone();
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (u64::MAX, 0u64);
            for (j, name) in CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let bit = 1u32 << j;
                let (mut on, mut off) = (0u64, 0u64);
                for id in 0..c.len() {
                    if c.cats[id] & bit != 0 {
                        if temp.bit(id) { on += 1 } else { off += 1 }
                    }
                }
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some((j, *name));
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some((j, name)) = best else { break };
            let bit = 1u32 << j;
            fake.change_category(c, bit, additive);
            temp.change_category(c, bit, !additive);
            rules.push(format!("{}@{name}", if additive { '+' } else { '-' }));
            applied[j] = true;
        }
        for id in 0..c.len() {
            let user = self.bit(id);
            if user != fake.bit(id) {
                rules.push(format!("{}{}", if user { '+' } else { '-' }, c.names[id]));
                fake.change(c, id, user);
            }
            if !user && let Some(args) = self.first_args.get(&id) {
                for a in args {
                    rules.push(format!("+{}|{a}", c.names[id]));
                }
            }
        }
        rules.join(" ")
    }
}

fn pattern_text((flags, p): &(u8, String)) -> String {
    match *flags {
        READ => format!("%R~{p}"),
        WRITE => format!("%W~{p}"),
        _ => format!("~{p}"),
    }
}
