//! Users and permissions, as Redis 6 and 7 have them (ACL): the users by
//! name, what changes them (ACL SETUSER, DELUSER, LOAD; `requirepass`
//! sets the default user's password), the ACL file, the log of denials
//! (ACL LOG) and their counts. The checks themselves run where a command's
//! keys are known: the RESP dispatcher and the memcached commands.
//!
//! Every change bumps `version`; a connection keeps the user it
//! authenticated as and looks it up again when the version moved, so a
//! change applies to connected clients at their next command, and a
//! deleted user's connections are closed, as in Redis.

pub mod catalog;
pub mod redis_names;
pub mod selector;
#[cfg(test)]
mod tests;
pub mod user;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

pub use catalog::Catalog;
pub use selector::{READ, WRITE};
pub use user::User;

/// ACL LOG entries kept (Redis's `acllog-max-len` default).
const LOG_MAX: usize = 128;
/// Denials this close in time, for the same reason, object and user, are
/// one entry with a count (Redis's `ACL_LOG_GROUPING_MAX_TIME_DELTA`).
const LOG_GROUPING_MS: u64 = 60_000;

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    Command,
    Key,
    Channel,
    Auth,
}

impl Denied {
    fn reason(self) -> &'static str {
        match self {
            Denied::Command => "command",
            Denied::Key => "key",
            Denied::Channel => "channel",
            Denied::Auth => "auth",
        }
    }
}

/// One ACL LOG entry.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub count: u64,
    pub reason: &'static str,
    pub context: &'static str,
    pub object: String,
    pub username: String,
    pub ctime_ms: u64,
    pub client_info: String,
}

#[derive(Debug)]
pub struct Acl {
    catalog: Catalog,
    users: RwLock<BTreeMap<String, Arc<User>>>,
    version: AtomicU64,
    log: Mutex<VecDeque<LogEntry>>,
    /// `aclfile`: where ACL SAVE writes and ACL LOAD reads.
    pub file: Option<PathBuf>,
    /// INFO's `acl_access_denied_*`.
    pub denied_auth: AtomicU64,
    pub denied_cmd: AtomicU64,
    pub denied_key: AtomicU64,
    pub denied_channel: AtomicU64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Acl {
    /// The default user (with `requirepass` as its password), then the
    /// users of `file` if given: a file that does not load is an error.
    pub fn new(
        catalog: Catalog,
        requirepass: Option<&str>,
        file: Option<PathBuf>,
    ) -> Result<Acl, String> {
        let mut default = User::default_user(&catalog);
        if let Some(p) = requirepass {
            default
                .apply(&catalog, "resetpass")
                .and_then(|()| default.apply(&catalog, &format!(">{p}")))
                .map_err(|e| e.text().to_string())?;
        }
        let users = BTreeMap::from([("default".to_string(), Arc::new(default))]);
        let acl = Acl::of(catalog, users, file);
        if acl.file.is_some() {
            acl.load()?;
        }
        Ok(acl)
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Moves on every change.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    pub fn default_user(&self) -> Arc<User> {
        self.user("default")
            .expect("the default user always exists")
    }

    /// Whether a new connection must authenticate before it runs commands
    /// (the default user has a password, or is off).
    pub fn default_requires_auth(&self) -> bool {
        let d = self.default_user();
        !d.nopass || !d.enabled
    }

    /// The user `name` if `pass` authenticates it.
    pub fn authenticate(&self, name: &str, pass: &[u8]) -> Option<Arc<User>> {
        self.user(name).filter(|u| u.accepts(pass))
    }

    fn changed(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// ACL SETUSER: the rules apply to a copy of the user; the table with
    /// that copy in it, as text (`to_text`), if every rule was valid. The
    /// table itself changes when the text is put in place (`replace`),
    /// here or, on a cluster, on every node through the log.
    pub fn set_user_text(&self, name: &str, args: &[String]) -> Result<String, String> {
        if name.bytes().any(|b| b.is_ascii_whitespace() || b == 0) {
            return Err("Usernames can't contain spaces or null characters".into());
        }
        let rules = user::merge_selector_args(args).map_err(|start| {
            format!("Unmatched parenthesis in acl selector starting at '{start}'.")
        })?;
        let mut users = self.users.read().clone();
        let mut u = match users.get(name) {
            Some(u) => (**u).clone(),
            None => User::new(name, &self.catalog),
        };
        for r in &rules {
            u.apply(&self.catalog, r)
                .map_err(|e| format!("Error in ACL SETUSER modifier '{r}': {}", e.text()))?;
        }
        users.insert(name.to_string(), Arc::new(u));
        Ok(self.text_of(&users))
    }

    /// ACL DELUSER: how many of `names` exist, and the table without them
    /// as text. `default` cannot go.
    pub fn del_users_text(&self, names: &[String]) -> Result<(usize, String), String> {
        if names.iter().any(|n| n == "default") {
            return Err("The 'default' user cannot be removed".into());
        }
        let mut users = self.users.read().clone();
        let n = names
            .iter()
            .filter(|n| users.remove(n.as_str()).is_some())
            .count();
        Ok((n, self.text_of(&users)))
    }

    /// ACL SETUSER on this node alone.
    pub fn set_user(&self, name: &str, args: &[String]) -> Result<(), String> {
        let text = self.set_user_text(name, args)?;
        self.replace(&text)
    }

    /// ACL DELUSER on this node alone.
    pub fn del_users(&self, names: &[String]) -> Result<usize, String> {
        let (n, text) = self.del_users_text(names)?;
        self.replace(&text)?;
        Ok(n)
    }

    /// A copy of this ACL (commands, file) whose users are those of
    /// `text` (`to_text`'s form): the table a change on a cluster node is
    /// decided from, the one the log holds, which the table in place
    /// follows a moment after it applies.
    pub fn with_table(&self, text: &str) -> Result<Acl, String> {
        let users = self.parse_text(text, "the ACL table")?;
        Ok(Acl::of(self.catalog.clone(), users, self.file.clone()))
    }

    /// An ACL of these users, nothing denied or logged yet.
    fn of(catalog: Catalog, users: BTreeMap<String, Arc<User>>, file: Option<PathBuf>) -> Acl {
        Acl {
            catalog,
            users: RwLock::new(users),
            version: AtomicU64::new(0),
            log: Mutex::new(VecDeque::new()),
            file,
            denied_auth: AtomicU64::new(0),
            denied_cmd: AtomicU64::new(0),
            denied_key: AtomicU64::new(0),
            denied_channel: AtomicU64::new(0),
        }
    }

    /// Puts a table in place, from the text `to_text` writes (what
    /// `set_user_text` and the others give, or what the log carries).
    pub fn replace(&self, text: &str) -> Result<(), String> {
        self.load_text(text, "the ACL table")
    }

    fn text_of(&self, users: &BTreeMap<String, Arc<User>>) -> String {
        users
            .values()
            .map(|u| format!("user {} {}\n", u.name, u.describe(&self.catalog)))
            .collect()
    }

    /// Every user's name, in order.
    pub fn names(&self) -> Vec<String> {
        self.users.read().keys().cloned().collect()
    }

    /// Every user as a line of the ACL file (ACL LIST).
    pub fn lines(&self) -> Vec<String> {
        self.users
            .read()
            .values()
            .map(|u| format!("user {} {}", u.name, u.describe(&self.catalog)))
            .collect()
    }

    /// The whole table in the ACL file's format.
    pub fn to_text(&self) -> String {
        self.lines().into_iter().map(|l| l + "\n").collect()
    }

    /// Replaces every user with those of `text` (the ACL file's format),
    /// all or nothing, as Redis's `ACLLoadFromFile`; `source` names the
    /// text in errors. Without a `default` line, the default user is the
    /// built-in one.
    pub fn load_text(&self, text: &str, source: &str) -> Result<(), String> {
        let users = self.parse_text(text, source)?;
        *self.users.write() = users;
        self.changed();
        Ok(())
    }

    /// The users of `text`, or every error in it (Redis's messages).
    fn parse_text(&self, text: &str, source: &str) -> Result<BTreeMap<String, Arc<User>>, String> {
        let mut users: BTreeMap<String, Arc<User>> = BTreeMap::new();
        let mut errors = String::new();
        for (i, line) in text.split('\n').enumerate() {
            let n = i + 1;
            let line = line.trim_matches([' ', '\t', '\r', '\n']);
            if line.is_empty() {
                continue;
            }
            let words: Vec<String> = line
                .split(' ')
                .filter(|w| !w.is_empty())
                .map(String::from)
                .collect();
            if words.len() < 2 || words[0] != "user" {
                errors.push_str(&format!(
                    "{source}:{n} should start with user keyword followed by the username. "
                ));
                continue;
            }
            let name = &words[1];
            if users.contains_key(name) {
                errors.push_str(&format!(
                    "WARNING: Duplicate user '{name}' found on line {n}. "
                ));
                continue;
            }
            let rules = match user::merge_selector_args(&words[2..]) {
                Ok(r) => r,
                Err(_) => {
                    errors.push_str(&format!(
                        "{source}:{n}: Unmatched parenthesis in selector definition."
                    ));
                    continue;
                }
            };
            let mut u = User::new(name, &self.catalog);
            let mut failed = false;
            for r in &rules {
                if let Err(e) = u.apply(&self.catalog, r) {
                    if e == selector::RuleError::Unknown {
                        errors.push_str(&format!(
                            "{source}:{n}: Error in applying operation '{r}': {}. ",
                            e.text()
                        ));
                    } else if !failed {
                        errors.push_str(&format!("{source}:{n}: {}. ", e.text()));
                    }
                    failed = true;
                }
            }
            if !failed {
                users.insert(name.clone(), Arc::new(u));
            }
        }
        if !errors.is_empty() {
            errors.push_str(
                "WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
            );
            return Err(errors);
        }
        users
            .entry("default".into())
            .or_insert_with(|| Arc::new(User::default_user(&self.catalog)));
        Ok(users)
    }

    /// ACL LOAD: the whole file, or no change.
    pub fn load(&self) -> Result<(), String> {
        let text = self.file_text()?;
        self.replace(&text)
    }

    /// The ACL file's text, checked: every line of it loads (Redis's
    /// errors, naming the file and line, otherwise).
    pub fn file_text(&self) -> Result<String, String> {
        let path = self.file.as_deref().ok_or_else(no_file)?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("Error loading ACLs, opening file '{}': {e}", path.display()))?;
        self.parse_text(&text, &path.display().to_string())?;
        Ok(text)
    }

    /// ACL SAVE: written to a temporary file, synced, renamed over it.
    pub fn save(&self) -> Result<(), String> {
        let path = self.file.as_deref().ok_or_else(no_file)?;
        write_atomically(path, self.to_text().as_bytes()).map_err(|e| {
            tracing::warn!("ACL SAVE to {}: {e}", path.display());
            "There was an error trying to save the ACLs. Please check the server logs for more \
             information"
                .to_string()
        })
    }

    /// Counts a denial and logs it (ACL LOG), merging it into a recent
    /// entry of the same reason, context, object and user.
    pub fn deny(
        &self,
        why: Denied,
        in_multi: bool,
        object: &str,
        username: &str,
        client_info: String,
    ) {
        let counter = match why {
            Denied::Command => &self.denied_cmd,
            Denied::Key => &self.denied_key,
            Denied::Channel => &self.denied_channel,
            Denied::Auth => &self.denied_auth,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        let context = if in_multi { "multi" } else { "toplevel" };
        let mut log = self.log.lock();
        let found = log.iter().take(10).position(|e| {
            e.reason == why.reason()
                && e.context == context
                && e.ctime_ms.abs_diff(now) <= LOG_GROUPING_MS
                && e.object == object
                && e.username == username
        });
        if let Some(i) = found {
            let mut e = log.remove(i).expect("found above");
            e.count += 1;
            e.ctime_ms = now;
            e.client_info = client_info;
            log.push_front(e);
            return;
        }
        log.push_front(LogEntry {
            count: 1,
            reason: why.reason(),
            context,
            object: object.to_string(),
            username: username.to_string(),
            ctime_ms: now,
            client_info,
        });
        log.truncate(LOG_MAX);
    }

    /// The newest `n` log entries, with their age in seconds.
    pub fn log_entries(&self, n: usize) -> Vec<(LogEntry, f64)> {
        let now = now_ms();
        self.log
            .lock()
            .iter()
            .take(n)
            .map(|e| (e.clone(), now.saturating_sub(e.ctime_ms) as f64 / 1000.0))
            .collect()
    }

    pub fn log_reset(&self) {
        self.log.lock().clear();
    }
}

/// Which user a connection runs as, looked up again when the ACL table
/// changed since (`Acl::version`).
#[derive(Debug, Default)]
pub struct ConnUser {
    /// None: the default user, not looked up yet.
    user: Option<Arc<User>>,
    version: u64,
}

impl ConnUser {
    /// The connection's user as the ACL table has it now; None if it was
    /// deleted (the connection is then closed, as Redis does).
    pub fn current(&mut self, acl: &Acl) -> Option<&Arc<User>> {
        let v = acl.version();
        let name = self.user.as_ref().map_or("default", |u| u.name.as_str());
        if self.user.is_none() || v != self.version {
            self.user = acl.user(name);
            self.version = v;
        }
        self.user.as_ref()
    }

    pub fn set(&mut self, user: Arc<User>, acl: &Acl) {
        self.user = Some(user);
        self.version = acl.version();
    }

    /// Whether batched reads may skip the checks: the user may run
    /// everything on every key.
    pub fn unrestricted(&mut self, acl: &Acl) -> bool {
        self.current(acl).is_some_and(|u| u.unrestricted())
    }
}

fn no_file() -> String {
    "This Redis instance is not configured to use an ACL file. You may want to specify users via \
     the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis \
     configuration file set) in order to store users in the Redis configuration."
        .into()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
