//! memcached listener: values of 1 MB and 8 MB arriving in pieces.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use combkv_server::{ByteSize, Listen, Server, ServerConfig};

fn start(cfg: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut c = ServerConfig {
        resp: Listen::Off,
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

    /// Reads exactly `n` bytes (fewer if the server closes).
    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut got = vec![0; n];
        let mut at = 0;
        while at < n {
            match self.0.read(&mut got[at..]) {
                Ok(0) => break,
                Ok(k) => at += k,
                Err(e) => panic!("read after {at} bytes: {e}"),
            }
        }
        got.truncate(at);
        got
    }
}

/// Values of 1 MB and 8 MB whose storage lines and data blocks arrive in
/// pieces cut inside the line, between CR and LF and next to the data's
/// CRLF, pipelined with small commands (the declared length sizes the
/// input buffer once): every byte comes back.
#[test]
fn large_values_cut_anywhere_come_back_exactly() {
    let server = start(|c| {
        c.max_value_bytes = ByteSize(16 << 20);
        c.max_request_bytes = ByteSize(16 << 20);
    });
    let mut c = Conn::new(&server);
    let value = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| {
                if i % 5000 == 0 {
                    b'\n'
                } else {
                    (i as u8).wrapping_mul(7) ^ seed
                }
            })
            .collect()
    };
    let (one, eight) = (value(1 << 20, 1), value(8 << 20, 2));
    let mut input = Vec::new();
    let mut cuts = Vec::new();
    for (key, v) in [("one", &one), ("eight", &eight)] {
        let line = format!("set {key} 5 0 {}\r\n", v.len());
        let at = input.len();
        // Inside the line, between its CR and LF, after it; around the
        // data's CRLF.
        cuts.extend([at + 5, at + line.len() - 1, at + line.len()]);
        input.extend_from_slice(line.as_bytes());
        input.extend_from_slice(v);
        let end = input.len();
        cuts.extend([end - 1, end, end + 1]);
        input.extend_from_slice(b"\r\nmn\r\n");
    }
    input.extend_from_slice(b"get one eight\r\n");
    cuts.extend((100_003..input.len()).step_by(100_003));
    cuts.push(input.len());
    cuts.sort_unstable();
    let mut writer = c.0.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut from = 0;
        for cut in cuts {
            writer.write_all(&input[from..cut]).unwrap();
            from = cut;
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let mut want = b"STORED\r\nMN\r\nSTORED\r\nMN\r\n".to_vec();
    for (key, v) in [("one", &one), ("eight", &eight)] {
        want.extend_from_slice(format!("VALUE {key} 5 {}\r\n", v.len()).as_bytes());
        want.extend_from_slice(v);
        want.extend_from_slice(b"\r\n");
    }
    want.extend_from_slice(b"END\r\n");
    let got = c.read_n(want.len());
    sender.join().unwrap();
    assert!(got == want, "{} bytes back, want {}", got.len(), want.len());
    c.0.write_all(b"get none\r\n").unwrap();
    assert_eq!(c.read_n(5), b"END\r\n");
}
