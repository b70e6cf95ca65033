//! The service example as a child process: started on free loopback ports, asked over plain
//! HTTP/1.1, and watched through `/proc` (resident memory, threads, CPU time).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The running service: killed when dropped.
pub struct Service {
    child: Child,
    /// The application's address (`/echo`).
    pub app: SocketAddr,
    /// The debug listener's address (`/debug/...`).
    pub debug: SocketAddr,
}

impl Service {
    /// Starts `exe` (the built example) with `--port 0 --metrics-port 0 --debug-addr 127.0.0.1:0`
    /// and `args`, and waits until it serves.
    pub fn start(exe: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(exe)
            .args(["--port", "0", "--metrics-port", "0", "--debug-addr", "127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("the service example");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let (app, debug) = loop {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "the service exited before serving");
            let after = |marker: &str| -> Option<SocketAddr> {
                line.split(marker).nth(1)?.split(|c: char| c.is_whitespace() || c == ',').next()?.parse().ok()
            };
            if let (Some(app), Some(debug)) = (after("serving on http://"), after("debug on http://")) {
                break (app, debug);
            }
        };
        // Keep reading its log, so that it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Self { child, app, debug }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory (KiB) and threads, from `/proc/<pid>/status`.
    pub fn rss_and_threads(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| -> u64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        (field("VmRSS:"), field("Threads:"))
    }

    /// Its CPU time, user and system, in seconds (`/proc/<pid>/stat`).
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // After the command's `(name)`: state is field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<u64> = rest.split_whitespace().skip(11).take(2).map(|f| f.parse().unwrap()).collect();
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (fields[0] + fields[1]) as f64 / ticks
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An answer: status, headers (names in lower case) and body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header of that name (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request on a fresh connection (`Connection: close`), without reading the answer.
pub fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // A server that refuses a long body may close before reading it all.
    let _ = s.write_all(body);
    s
}

/// Reads the answer to a request [`send`] sent.
pub fn answer(mut s: TcpStream) -> Answer {
    let mut raw = Vec::new();
    // A reset after the whole answer (the server closed with the body unread) ends it too.
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer { status, headers, body: raw[split + 4..].to_vec() }
}

/// One request on its own connection, answered.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Answer {
    answer(send(addr, method, path, body))
}
