//! Users and permissions (ACL) as Redis 7 has them: each case in
//! `acl/cases.rs` is a sequence of commands, sent on numbered connections,
//! to a redis-server 7 and to `combkv serve` alike; every reply must be the
//! same, typed as the wire typed it (a simple string is not a bulk string).
//!
//! Only what must differ is normalised, each by the step that expects it:
//! ACL LOG entries lose `age-seconds` and `client-info` (and Redis 7.2's
//! `entry-id`, `timestamp-created`, `timestamp-last-updated`, which 7.0
//! does not send); HELLO's `id`, `version` and `server`; ACL GENPASS's
//! random hex becomes its length; ACL CAT <category> is compared as a set,
//! each side less the commands the other does not have (COMMAND INFO:
//! combkv's own, and those of another Redis version); an aclfile's path in
//! an error becomes `<aclfile>`; in ACL GETUSER, ACL LIST and aclfile text
//! the single-command rules after the categories are sorted, as Redis 7.0
//! orders them by a hash seeded at random (`sort_command_rules`).
//!
//! A failing test prints every step that differed, with both replies, so
//! one run lists all the differences, not the first; `COMBKV_ACL_SHOW=1`
//! prints every step's replies, alike or not.

#[path = "acl/cases.rs"]
mod cases;
#[path = "acl/combkv_only.rs"]
mod combkv_only;
#[path = "acl/normalise.rs"]
mod normalise;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use normalise::{genpass, hello, known, log, map_text, sort_command_rules, sorted_names};
use support::Server;
use support::resp::{Client, Redis, Value, redis_installed};

/// How a step's two replies are compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    Exact,
    /// ACL LOG: entries without their times and client descriptions.
    Log,
    /// HELLO: the map without `id` and `version`.
    Hello,
    /// ACL GENPASS: the length of the password and whether it is hex.
    Genpass,
    /// ACL CAT <category>: the same set of the commands both servers have.
    Category,
}

/// What a step does.
#[derive(Clone, Debug)]
pub enum Action {
    /// A command on connection `conn` (opened on first use).
    Cmd { conn: usize, args: Vec<String> },
    /// Both servers' aclfiles must hold the same text.
    ReadFile,
    /// Both servers' aclfiles are overwritten with this text.
    WriteFile(String),
}

#[derive(Clone, Debug)]
pub struct Step {
    pub action: Action,
    pub cmp: Cmp,
}

/// A command (split at spaces) on connection `conn`, replies equal.
pub fn c(conn: usize, line: &str) -> Step {
    cmp(conn, line, Cmp::Exact)
}

pub fn cmp(conn: usize, line: &str, cmp: Cmp) -> Step {
    Step {
        action: Action::Cmd {
            conn,
            args: split(line),
        },
        cmp,
    }
}

/// `line` split at spaces, except inside a selector's parentheses: `(+get
/// ~k*)` is one argument, as a client would quote it.
fn split(line: &str) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    let mut open = false;
    for word in line.split_whitespace() {
        match args.last_mut() {
            Some(last) if open => {
                last.push(' ');
                last.push_str(word);
            }
            _ => args.push(word.to_string()),
        }
        let last = args.last().unwrap();
        open = last.starts_with('(') && !last.ends_with(')');
    }
    args
}

#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub steps: Vec<Step>,
}

pub fn case(name: &str, steps: Vec<Step>) -> Case {
    Case {
        name: name.to_string(),
        steps,
    }
}

/// The aclfile both servers start with, as the lead's brief asks.
pub const DEFAULT_ACLFILE: &str = "user default on nopass ~* &* +@all\n";

/// A redis-server and a combkv, each with its connections and aclfile.
struct Pair {
    redis: Redis,
    combkv: Server,
    conns: Vec<(Client, Client)>,
    files: Option<(PathBuf, PathBuf)>,
}

impl Pair {
    /// Both servers; with `dir`, each with its own aclfile in it (combkv's
    /// only used with `combkv_aclfile`).
    fn start(dir: Option<&Path>, combkv_aclfile: bool, args: &[&str]) -> Pair {
        let files = dir.map(|d| {
            let (r, k) = (d.join("redis.acl"), d.join("combkv.acl"));
            std::fs::write(&r, DEFAULT_ACLFILE).unwrap();
            std::fs::write(&k, DEFAULT_ACLFILE).unwrap();
            (r, k)
        });
        let redis = Redis::start(files.as_ref().map(|f| f.0.as_path()), args);
        let mut combkv_args = args.to_vec();
        if let Some((_, k)) = files.as_ref().filter(|_| combkv_aclfile) {
            combkv_args.extend(["--aclfile", k.to_str().unwrap()]);
        }
        let combkv = Server::start(&combkv_args, None);
        Pair {
            redis,
            combkv,
            conns: Vec::new(),
            files,
        }
    }

    fn conn(&mut self, i: usize) -> &mut (Client, Client) {
        while self.conns.len() <= i {
            let pair = (
                Client::connect(self.redis.addr),
                Client::connect(self.combkv.resp),
            );
            self.conns.push(pair);
        }
        &mut self.conns[i]
    }

    /// Runs `case`, adding a line per differing step to `diffs`; returns
    /// the number of steps run.
    fn run(&mut self, case: &Case, diffs: &mut Vec<String>) -> usize {
        for (i, step) in case.steps.iter().enumerate() {
            let (what, ours, theirs) = match &step.action {
                Action::Cmd { conn, args } => {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let (r, k) = self.conn(*conn);
                    let (theirs, ours) = (r.cmd(&args), k.cmd(&args));
                    let (ours, theirs) = self.normalise(step.cmp, &args, ours, theirs);
                    (format!("[{conn}] {}", args.join(" ")), ours, theirs)
                }
                Action::ReadFile => {
                    let (r, k) = self.files.clone().expect("a case with aclfiles");
                    let read =
                        |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| e.to_string());
                    (
                        "(aclfile text)".into(),
                        format!("{:?}", read(&k)),
                        format!("{:?}", read(&r)),
                    )
                }
                Action::WriteFile(text) => {
                    let (r, k) = self.files.clone().expect("a case with aclfiles");
                    std::fs::write(r, text).unwrap();
                    std::fs::write(k, text).unwrap();
                    continue;
                }
            };
            if std::env::var_os("COMBKV_ACL_SHOW").is_some() {
                eprintln!(
                    "{} / step {i}: {what}\n    redis:  {theirs}\n    combkv: {ours}",
                    case.name
                );
            }
            if ours != theirs {
                diffs.push(format!(
                    "{} / step {i}: {what}\n    redis:  {theirs}\n    combkv: {ours}",
                    case.name
                ));
            }
        }
        case.steps.len()
    }

    /// The two replies as the text they are compared by.
    fn normalise(
        &mut self,
        cmp: Cmp,
        args: &[&str],
        ours: Value,
        theirs: Value,
    ) -> (String, String) {
        let paths = self.files.clone();
        let unpath = |v: Value, path: Option<&PathBuf>| match (v, path) {
            (Value::Error(e), Some(p)) => Value::Error(e.replace(p.to_str().unwrap(), "<aclfile>")),
            (v, _) => v,
        };
        let ours = unpath(ours, paths.as_ref().map(|p| &p.1));
        let theirs = unpath(theirs, paths.as_ref().map(|p| &p.0));
        // combkv answers as Redis 7.2 (INFO says redis_version:7.2.0), whose
        // words differ from 7.0's in two places these cases reach.
        let theirs = map_text(theirs, &|t: &str| {
            t.replace("    Prints this help.", "    Print this help.")
                .replace(
                    "otherwise the HELLO AUTH <user> <pass> option",
                    "otherwise the HELLO <proto> AUTH <user> <pass> option",
                )
        });
        let theirs = match theirs {
            Value::Error(e) => Value::Error(e.replace(
                "otherwise the HELLO AUTH <user> <pass> option",
                "otherwise the HELLO <proto> AUTH <user> <pass> option",
            )),
            v => v,
        };
        let describes_users = args.len() >= 2
            && args[0].eq_ignore_ascii_case("ACL")
            && ["GETUSER", "LIST"]
                .iter()
                .any(|s| args[1].eq_ignore_ascii_case(s));
        let (ours, theirs) = if describes_users {
            (
                map_text(ours, &sort_command_rules),
                map_text(theirs, &sort_command_rules),
            )
        } else {
            (ours, theirs)
        };
        match cmp {
            Cmp::Exact => (ours.to_string(), theirs.to_string()),
            Cmp::Log => (log(ours).to_string(), log(theirs).to_string()),
            Cmp::Hello => (hello(ours).to_string(), hello(theirs).to_string()),
            Cmp::Genpass => (genpass(&ours), genpass(&theirs)),
            Cmp::Category => {
                // Each side less the commands the other lacks: combkv's
                // own (RANGE...) and those of another Redis version.
                let theirs_known = known(self.combkv.resp, &theirs);
                let ours_known = known(self.redis.addr, &ours);
                (
                    sorted_names(&ours, Some(&ours_known)),
                    sorted_names(&theirs, Some(&theirs_known)),
                )
            }
        }
    }
}

/// True when this combkv build takes `--aclfile` (main gains it while
/// these tests are written): without it the aclfile cases are reported as
/// differences instead of waiting for a server that cannot start.
fn combkv_takes_aclfile() -> bool {
    let out = Command::new(support::binary())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("--aclfile")
}

/// Runs `cases` on one pair of servers (each case cleans up after itself)
/// or, with `fresh`, on a new pair per case; fails listing every
/// difference.
fn compare(cases: Vec<Case>, fresh: bool, aclfile: bool) {
    compare_with(cases, fresh, aclfile, &[]);
}

/// `compare` with `args` given to both servers at start (settings both
/// spell alike, as `--requirepass`).
fn compare_with(cases: Vec<Case>, fresh: bool, aclfile: bool, args: &[&str]) {
    if !redis_installed() {
        return;
    }
    let mut diffs = Vec::new();
    // Without the setting combkv would not start: it starts without it,
    // and every step that needs the file shows as a difference.
    let combkv_aclfile = aclfile && combkv_takes_aclfile();
    if aclfile && !combkv_aclfile {
        diffs.push("combkv serve has no --aclfile setting: combkv started without one".into());
    }
    let dir = aclfile.then(|| {
        let d = std::env::temp_dir().join(format!(
            "combkv-acl-{}-{}",
            cases[0].name.replace(' ', "-"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    });
    let mut steps = 0;
    let mut pair = None;
    for case in &cases {
        if fresh || pair.is_none() {
            // The old pair stops before the new one starts.
            drop(pair.take());
            pair = Some(Pair::start(dir.as_deref(), combkv_aclfile, args));
        }
        steps += pair.as_mut().unwrap().run(case, &mut diffs);
    }
    if let Some(d) = dir.filter(|_| diffs.is_empty()) {
        let _ = std::fs::remove_dir_all(d);
    }
    assert!(
        diffs.is_empty(),
        "{} of {steps} steps in {} cases differ from redis-server:\n{}",
        diffs.len(),
        cases.len(),
        diffs.join("\n")
    );
}

#[test]
fn setuser_rules_read_back_as_in_redis() {
    compare(cases::setuser_rules(), false, false);
}

#[test]
fn setuser_errors_as_in_redis() {
    compare(cases::setuser_errors(), false, false);
}

#[test]
fn auth_and_hello_as_in_redis() {
    compare(cases::auth(), true, false);
}

#[test]
fn users_deluser_whoami_as_in_redis() {
    compare(cases::users(), true, false);
}

#[test]
fn cat_genpass_help_as_in_redis() {
    compare(cases::cat_genpass_help(), false, false);
}

#[test]
fn dryrun_as_in_redis() {
    compare(cases::dryrun(), true, false);
}

#[test]
fn noperm_and_log_as_in_redis() {
    compare(cases::noperm_and_log(), true, false);
}

#[test]
fn key_specs_decide_read_and_write_as_in_redis() {
    compare(cases::key_specs(), true, false);
}

#[test]
fn order_of_checks_as_in_redis() {
    compare(cases::check_order(), true, false);
}

#[test]
fn connected_users_and_log_length_as_in_redis() {
    compare(cases::changes_and_log_length(), true, false);
}

#[test]
fn multi_exec_as_in_redis() {
    compare(cases::multi(), true, false);
}

#[test]
fn aclfile_save_load_as_in_redis() {
    compare(cases::aclfile(), true, true);
}

#[test]
fn requirepass_is_the_default_users_password_as_in_redis() {
    compare_with(
        cases::requirepass(),
        true,
        false,
        &["--requirepass", "secret"],
    );
}
