//! memcached listener: raw bytes in, exact bytes out, for every command and
//! the error path of each. Each exchange is followed by `mn`, whose `MN`
//! proves nothing else was sent (noreply, swallowed data blocks).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use combkv_server::{ByteSize, Listen, Server, ServerConfig};

fn start(cfg: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut c = ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 1,
        ..Default::default()
    };
    cfg(&mut c);
    Server::start(c).expect("server starts")
}

struct Conn(TcpStream);

impl Conn {
    fn new(server: &Server) -> Conn {
        let s = TcpStream::connect(server.memcached_addr().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn(s)
    }

    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut got = vec![0; n];
        let mut at = 0;
        while at < n {
            match self.0.read(&mut got[at..]) {
                Ok(0) => break,
                Ok(k) => at += k,
                Err(e) => panic!("read after {:?}: {e}", String::from_utf8_lossy(&got[..at])),
            }
        }
        got.truncate(at);
        got
    }

    /// Sends `send` and a no-op; expects exactly `expect` then `MN`.
    fn check(&mut self, send: &[u8], expect: &[u8]) {
        self.0.write_all(send).unwrap();
        self.0.write_all(b"mn\r\n").unwrap();
        let want = [expect, b"MN\r\n"].concat();
        let got = self.read_n(want.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "request {:?}",
            String::from_utf8_lossy(send)
        );
    }

    /// Sends `send`, expects `expect` and then the connection closed.
    fn check_closes(&mut self, send: &[u8], expect: &[u8]) {
        self.0.write_all(send).unwrap();
        let mut got = Vec::new();
        self.0.read_to_end(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expect)
        );
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn set_get_gets() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(b"get a\r\n", b"END\r\n");
    c.check(b"set a 5 0 3\r\nxyz\r\n", b"STORED\r\n");
    c.check(b"get a\r\n", b"VALUE a 5 3\r\nxyz\r\nEND\r\n");
    c.check(b"set b 4294967295 0 0\r\n\r\n", b"STORED\r\n");
    c.check(
        b"get a nope b\r\n",
        b"VALUE a 5 3\r\nxyz\r\nVALUE b 4294967295 0\r\n\r\nEND\r\n",
    );
    let v = server
        .store()
        .get_item(b"a")
        .unwrap()
        .unwrap()
        .version
        .get();
    c.check(
        b"gets a\r\n",
        format!("VALUE a 5 3 {v}\r\nxyz\r\nEND\r\n").as_bytes(),
    );
    // Bare \n ends a line too; data may hold \r\n.
    c.check(
        b"set c 0 0 4\na\r\nb\r\nget c\n",
        b"STORED\r\nVALUE c 0 4\r\na\r\nb\r\nEND\r\n",
    );
    server.shutdown();
}

#[test]
fn add_replace_append_prepend_cas() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(b"replace k 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.check(b"append k 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.check(b"prepend k 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    c.check(b"add k 7 0 2\r\nmm\r\n", b"STORED\r\n");
    c.check(b"add k 0 0 2\r\nzz\r\n", b"NOT_STORED\r\n");
    // append/prepend keep the item's flags.
    c.check(b"append k 1 0 2\r\n>>\r\n", b"STORED\r\n");
    c.check(b"prepend k 2 0 2\r\n<<\r\n", b"STORED\r\n");
    c.check(b"get k\r\n", b"VALUE k 7 6\r\n<<mm>>\r\nEND\r\n");
    c.check(b"replace k 3 0 1\r\nr\r\n", b"STORED\r\n");
    c.check(b"get k\r\n", b"VALUE k 3 1\r\nr\r\nEND\r\n");
    let v = server
        .store()
        .get_item(b"k")
        .unwrap()
        .unwrap()
        .version
        .get();
    c.check(b"cas nope 0 0 1 1\r\nx\r\n", b"NOT_FOUND\r\n");
    c.check(
        format!("cas k 0 0 1 {}\r\nx\r\n", v + 100).as_bytes(),
        b"EXISTS\r\n",
    );
    c.check(
        format!("cas k 9 0 1 {v}\r\nc\r\n").as_bytes(),
        b"STORED\r\n",
    );
    c.check(
        format!("cas k 9 0 1 {v}\r\nd\r\n").as_bytes(),
        b"EXISTS\r\n",
    );
    c.check(b"get k\r\n", b"VALUE k 9 1\r\nc\r\nEND\r\n");
    server.shutdown();
}

#[test]
fn noreply_suppresses_every_reply() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(b"set k 0 0 1 noreply\r\n1\r\n", b"");
    c.check(b"add k 0 0 1 noreply\r\n2\r\n", b"");
    c.check(b"incr k 5 noreply\r\n", b"");
    c.check(b"touch k 100 noreply\r\n", b"");
    c.check(b"get k\r\n", b"VALUE k 0 1\r\n6\r\nEND\r\n");
    c.check(b"delete k noreply\r\n", b"");
    c.check(b"delete k 0 noreply\r\n", b"");
    // memcached's noreply hides errors too.
    c.check(b"set k x 0 1 noreply\r\nz\r\n", b"");
    c.check(b"verbosity 1 noreply\r\n", b"");
    c.check(b"flush_all noreply\r\n", b"");
    c.check(b"get k\r\n", b"END\r\n");
    server.shutdown();
}

#[test]
fn delete_forms() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    c.check(b"delete k\r\n", b"DELETED\r\n");
    c.check(b"delete k\r\n", b"NOT_FOUND\r\n");
    c.check(b"delete k 0\r\n", b"NOT_FOUND\r\n");
    c.check(
        b"delete k 5\r\n",
        b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
    );
    c.check(b"delete\r\n", b"ERROR\r\n");
    c.check(b"delete a b c d\r\n", b"ERROR\r\n");
    server.shutdown();
}

#[test]
fn incr_decr() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(b"incr n 1\r\n", b"NOT_FOUND\r\n");
    c.check(b"set n 3 0 2\r\n10\r\n", b"STORED\r\n");
    c.check(b"incr n 5\r\n", b"15\r\n");
    c.check(b"decr n 100\r\n", b"0\r\n");
    c.check(b"set n 3 0 20\r\n18446744073709551615\r\n", b"STORED\r\n");
    c.check(b"incr n 2\r\n", b"1\r\n");
    c.check(b"get n\r\n", b"VALUE n 3 1\r\n1\r\nEND\r\n");
    c.check(
        b"incr n -1\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    c.check(
        b"incr n x\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    c.check(b"set s 0 0 3\r\nabc\r\n", b"STORED\r\n");
    c.check(
        b"incr s 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    c.check(b"set e 0 0 0\r\n\r\n", b"STORED\r\n");
    c.check(
        b"decr e 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    c.check(b"incr\r\n", b"ERROR\r\n");
    server.shutdown();
}

#[test]
fn exptime_touch_and_gat() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    // Negative: expired at once. Larger than 30 days: a unix time.
    c.check(b"set k 0 -1 1\r\nv\r\n", b"STORED\r\n");
    c.check(b"get k\r\n", b"END\r\n");
    c.check(b"set k 0 1000000000 1\r\nv\r\n", b"STORED\r\n");
    c.check(b"get k\r\n", b"END\r\n");
    let future = unix_now() + 1000;
    c.check(
        format!("set k 0 {future} 1\r\nv\r\n").as_bytes(),
        b"STORED\r\n",
    );
    let exp = server
        .store()
        .get_item(b"k")
        .unwrap()
        .unwrap()
        .expires_at_ms;
    assert_eq!(exp, Some(future * 1000));
    c.check(b"set k 0 100 1\r\nv\r\n", b"STORED\r\n");
    c.check(b"touch k 0\r\n", b"TOUCHED\r\n");
    assert_eq!(
        server
            .store()
            .get_item(b"k")
            .unwrap()
            .unwrap()
            .expires_at_ms,
        None
    );
    c.check(b"touch nope 10\r\n", b"NOT_FOUND\r\n");
    c.check(
        b"touch k x\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    c.check(b"gat 100 k nope\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n");
    let v = server
        .store()
        .get_item(b"k")
        .unwrap()
        .unwrap()
        .version
        .get();
    c.check(
        b"gats 100 k\r\n",
        format!("VALUE k 0 1 {}\r\nv\r\nEND\r\n", v + 1).as_bytes(),
    );
    // gat returns the item, then it is gone.
    c.check(b"gat -1 k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n");
    c.check(b"get k\r\n", b"END\r\n");
    c.check(b"gat x k\r\n", b"CLIENT_ERROR invalid exptime argument\r\n");
    c.check(b"gat 10\r\n", b"END\r\n");
    server.shutdown();
}

#[test]
fn bad_input() {
    let server = start(|c| c.max_value_bytes = ByteSize(1024));
    let mut c = Conn::new(&server);
    c.check(b"bogus\r\n", b"ERROR\r\n");
    c.check(b"\r\n", b"ERROR\r\n");
    c.check(b"get\r\n", b"ERROR\r\n");
    c.check(b"set k 0 0\r\n", b"ERROR\r\n");
    c.check(b"mz k\r\n", b"ERROR\r\n");
    // A rejected command's data block is skipped, never run.
    c.check(
        b"set k x 0 9\r\nflush_all\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    );
    c.check(
        b"set k 0 0 -1\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    );
    let long = "k".repeat(251);
    c.check(
        format!("set {long} 0 0 1\r\nv\r\n").as_bytes(),
        b"CLIENT_ERROR key too long\r\n",
    );
    c.check(
        format!("get a {long}\r\n").as_bytes(),
        b"CLIENT_ERROR key too long\r\n",
    );
    c.check(
        format!("mg {long} v\r\n").as_bytes(),
        b"CLIENT_ERROR key too long\r\n",
    );
    c.check(
        format!("delete {long}\r\n").as_bytes(),
        b"CLIENT_ERROR key too long\r\n",
    );
    // Too large: refused before it is read, its bytes skipped as they come.
    c.0.write_all(b"set big 0 0 5000\r\n").unwrap();
    c.0.write_all(&vec![b'x'; 3000]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    c.0.write_all(&vec![b'y'; 2000]).unwrap();
    c.check(b"\r\n", b"SERVER_ERROR object too large for cache\r\n");
    c.check(b"get big\r\n", b"END\r\n");
    c.check(b"append k 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    let block = |line: &[u8], byte: u8, n: usize| [line, &vec![byte; n], b"\r\n"].concat();
    c.check(&block(b"set k 0 0 1000\r\n", b'a', 1000), b"STORED\r\n");
    c.check(
        &block(b"append k 0 0 100\r\n", b'b', 100),
        b"SERVER_ERROR object too large for cache\r\n",
    );
    // A data block without its \r\n terminator.
    c.check(
        b"set k 0 0 2\r\nabcd\r\n",
        b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
    );
    c.check(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    c.check(
        b"flush_all x\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    c.check(b"verbosity\r\n", b"ERROR\r\n");
    c.check(
        b"verbosity x\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    );
    // A line past 2048 bytes without a newline: error, then closed.
    let mut line = b"set ".to_vec();
    line.resize(3000, b'k');
    c.check_closes(&line, b"CLIENT_ERROR line too long\r\n");
    // A long multi-key get is fine.
    let mut c = Conn::new(&server);
    let keys: Vec<String> = (0..500).map(|i| format!("key{i}")).collect();
    c.check(format!("get {}\r\n", keys.join(" ")).as_bytes(), b"END\r\n");
    server.shutdown();
}

#[test]
fn meta_get_set() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(b"mg k v\r\n", b"EN\r\n");
    c.check(b"mg k v q\r\n", b"");
    c.check(b"mg k v Oab k\r\n", b"EN Oab kk\r\n");
    c.check(b"ms k 2 F5 T0\r\nhi\r\n", b"HD\r\n");
    let v = server
        .store()
        .get_item(b"k")
        .unwrap()
        .unwrap()
        .version
        .get();
    c.check(
        b"mg k s v f c t k O1\r\n",
        format!("VA 2 s2 f5 c{v} t-1 kk O1\r\nhi\r\n").as_bytes(),
    );
    c.check(b"mg k\r\n", b"HD\r\n");
    c.check(b"mg k q h l\r\n", b"HD h0 l0\r\n");
    c.check(b"mg k T100 t\r\n", b"HD t100\r\n");
    c.check(b"ms k 2 q\r\nho\r\n", b"");
    c.check(b"ms k 1 ME\r\nx\r\n", b"NS\r\n");
    c.check(b"ms n 1 MR\r\nx\r\n", b"NS\r\n");
    c.check(b"ms n 1 MA\r\nx\r\n", b"NS\r\n");
    c.check(b"ms n 1 MA N0\r\nx\r\n", b"HD\r\n");
    c.check(b"ms n 1 MP k\r\n<\r\n", b"HD kn\r\n");
    c.check(b"ms n 1 Ma\r\n>\r\n", b"HD\r\n");
    c.check(b"mg n v\r\n", b"VA 3\r\n<x>\r\n");
    c.check(b"ms n 1 C999999 O9\r\ny\r\n", b"EX O9\r\n");
    c.check(b"ms none 1 C1\r\ny\r\n", b"NF\r\n");
    let v = server
        .store()
        .get_item(b"n")
        .unwrap()
        .unwrap()
        .version
        .get();
    c.check(
        format!("ms n 1 C{v} c\r\nz\r\n").as_bytes(),
        format!("HD c{}\r\n", v + 1).as_bytes(),
    );
    c.check(
        b"ms n 1 MX\r\nz\r\n",
        b"CLIENT_ERROR invalid mode for ms M token\r\n",
    );
    c.check(
        b"ms n 1 MSS\r\nz\r\n",
        b"CLIENT_ERROR incorrect length for M token\r\n",
    );
    c.check(b"ms n x\r\n", b"CLIENT_ERROR bad command line format\r\n");
    c.check(b"ms n\r\n", b"CLIENT_ERROR bad command line format\r\n");
    c.check(
        b"ms n 2\r\nabcd\r\n",
        b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
    );
    c.check(b"mg n v v\r\n", b"CLIENT_ERROR duplicate flag\r\n");
    c.check(b"mg n !\r\n", b"CLIENT_ERROR invalid flag\r\n");
    c.check(
        b"mg n Tx\r\n",
        b"CLIENT_ERROR bad token in command line format\r\n",
    );
    c.check(b"mg n R5\r\n", b"CLIENT_ERROR invalid flag\r\n");
    let opaque = format!("O{}", "9".repeat(40));
    c.check(
        format!("mg n {opaque}\r\n").as_bytes(),
        b"CLIENT_ERROR opaque token too long\r\n",
    );
    let many = "a b c d e f g h i j k l m n o p q r";
    c.check(
        format!("mg n {many}\r\n").as_bytes(),
        b"CLIENT_ERROR options flags are too long\r\n",
    );
    // Base64 keys.
    c.check(b"ms Zm9v 3 b\r\nbar\r\n", b"HD\r\n");
    c.check(b"mg foo v\r\n", b"VA 3\r\nbar\r\n");
    c.check(b"mg Zm9v b v k\r\n", b"VA 3 kZm9v b\r\nbar\r\n");
    c.check(b"mg !!!! b v\r\n", b"CLIENT_ERROR error decoding key\r\n");
    c.check(b"mn\r\n", b"MN\r\n");
    server.shutdown();
}

#[test]
fn meta_delete_arith_debug() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(b"md k\r\n", b"NF\r\n");
    c.check(b"md k q Ox k\r\n", b"NF Ox kk\r\n");
    c.check(b"ms k 1\r\nv\r\n", b"HD\r\n");
    c.check(b"md k C999999\r\n", b"EX\r\n");
    c.check(b"md k q\r\n", b"");
    c.check(b"mg k\r\n", b"EN\r\n");
    c.check(b"md k z\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n");
    c.check(b"ma n\r\n", b"NF\r\n");
    c.check(b"ma n N0 J10 v\r\n", b"VA 2\r\n10\r\n");
    c.check(b"ma n v\r\n", b"VA 2\r\n11\r\n");
    c.check(b"ma n D5 q\r\n", b"");
    c.check(b"ma n MD D100 v t\r\n", b"VA 1 t-1\r\n0\r\n");
    c.check(
        b"ma n D18446744073709551615 v\r\n",
        b"VA 20\r\n18446744073709551615\r\n",
    );
    c.check(b"ma n MI v\r\n", b"VA 1\r\n0\r\n");
    c.check(b"ma n T100 t\r\n", b"HD t100\r\n");
    c.check(b"ma n C999999\r\n", b"EX\r\n");
    let v = server
        .store()
        .get_item(b"n")
        .unwrap()
        .unwrap()
        .version
        .get();
    c.check(
        format!("ma n C{v} c k\r\n").as_bytes(),
        format!("HD c{} kn\r\n", v + 1).as_bytes(),
    );
    c.check(
        b"ma n Mx\r\n",
        b"CLIENT_ERROR invalid mode for ma M token\r\n",
    );
    c.check(
        b"ma n Dx\r\n",
        b"CLIENT_ERROR invalid or duplicate flag\r\n",
    );
    c.check(b"ms s 1\r\nx\r\n", b"HD\r\n");
    c.check(
        b"ma s\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    let v = server
        .store()
        .get_item(b"s")
        .unwrap()
        .unwrap()
        .version
        .get();
    c.check(
        b"me s\r\n",
        format!("ME s exp=-1 la=0 cas={v} fetch=no cls=1 size=2\r\n").as_bytes(),
    );
    c.check(b"me nope\r\n", b"EN\r\n");
    c.check(b"me\r\n", b"CLIENT_ERROR bad command line format\r\n");
    server.shutdown();
}

#[test]
fn stats_version_verbosity_flush() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    c.check(
        b"version\r\n",
        format!("VERSION 1.6.0-combkv-{}\r\n", env!("CARGO_PKG_VERSION")).as_bytes(),
    );
    c.check(b"verbosity 1\r\n", b"OK\r\n");
    c.check(
        b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n",
        b"STORED\r\nSTORED\r\n",
    );
    c.check(
        b"get a b c\r\n",
        b"VALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\n",
    );
    c.0.write_all(b"stats\r\n").unwrap();
    let mut text = Vec::new();
    while !text.ends_with(b"END\r\n") {
        let mut buf = [0; 4096];
        let n = c.0.read(&mut buf).unwrap();
        assert!(n > 0);
        text.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(text).unwrap();
    let stat = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    assert_eq!(stat("pid"), std::process::id().to_string());
    assert_eq!(stat("curr_items"), "2");
    assert_eq!(stat("cmd_get"), "3");
    assert_eq!(stat("get_hits"), "2");
    assert_eq!(stat("get_misses"), "1");
    assert_eq!(stat("cmd_set"), "2");
    assert_eq!(stat("curr_connections"), "1");
    assert_eq!(stat("threads"), "1");
    assert!(stat("bytes").parse::<u64>().unwrap() > 0);
    assert!(stat("time").parse::<u64>().unwrap() >= unix_now() - 5);
    c.check(b"stats reset\r\n", b"RESET\r\n");
    c.check(b"stats nonsense\r\n", b"ERROR\r\n");
    // Delayed flush: still there now, gone after the delay.
    c.check(b"flush_all 1\r\n", b"OK\r\n");
    c.check(b"get a\r\n", b"VALUE a 0 1\r\n1\r\nEND\r\n");
    std::thread::sleep(Duration::from_millis(1600));
    c.check(b"get a b\r\n", b"END\r\n");
    // A later immediate flush cancels a pending delayed one.
    c.check(b"flush_all 1\r\nflush_all 0\r\n", b"OK\r\nOK\r\n");
    c.check(b"set a 0 0 1\r\n1\r\n", b"STORED\r\n");
    std::thread::sleep(Duration::from_millis(1600));
    c.check(b"get a\r\n", b"VALUE a 0 1\r\n1\r\nEND\r\n");
    c.check_closes(b"quit\r\nget a\r\n", b"");
    server.shutdown();
}

#[test]
fn writes_refused_above_maxmemory_reads_served() {
    let server = start(|c| c.maxmemory = ByteSize(1));
    server.store().put(b"k", b"7").unwrap();
    let mut c = Conn::new(&server);
    c.check(
        b"set a 0 0 1\r\nv\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
    );
    c.check(
        b"ms a 1 q\r\nv\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
    );
    c.check(b"incr k 1\r\n", b"SERVER_ERROR out of memory\r\n");
    c.check(b"ma k\r\n", b"SERVER_ERROR out of memory\r\n");
    c.check(b"get k a\r\n", b"VALUE k 0 1\r\n7\r\nEND\r\n");
    c.check(b"delete k\r\n", b"DELETED\r\n");
    server.shutdown();
}

#[test]
fn pipelined_reads_and_writes_answer_in_order() {
    let server = start(|_| {});
    let mut c = Conn::new(&server);
    let mut send = Vec::new();
    let mut expect = Vec::new();
    for i in 0..200 {
        send.extend_from_slice(
            format!("set k{i} {i} 0 {}\r\n{i}\r\n", i.to_string().len()).as_bytes(),
        );
        send.extend_from_slice(format!("get k{i} k{}\r\nmg k{i} v f\r\n", i + 1).as_bytes());
        expect.extend_from_slice(b"STORED\r\n");
        expect.extend_from_slice(
            format!(
                "VALUE k{i} {i} {}\r\n{i}\r\nEND\r\nVA {} f{i}\r\n{i}\r\n",
                i.to_string().len(),
                i.to_string().len()
            )
            .as_bytes(),
        );
    }
    c.check(&send, &expect);
    server.shutdown();
}

#[test]
fn items_and_client_flags_survive_a_restart() {
    let dir = std::env::temp_dir().join(format!("combkv-mc-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = start(|c| c.data_dir = Some(dir.clone()));
    let mut c = Conn::new(&server);
    c.check(
        b"set k 42 0 1\r\nv\r\nms m 2 F7 T0\r\nhi\r\n",
        b"STORED\r\nHD\r\n",
    );
    drop(c);
    server.shutdown();
    let server = start(|c| c.data_dir = Some(dir.clone()));
    let mut c = Conn::new(&server);
    c.check(
        b"get k m\r\n",
        b"VALUE k 42 1\r\nv\r\nVALUE m 7 2\r\nhi\r\nEND\r\n",
    );
    drop(c);
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
