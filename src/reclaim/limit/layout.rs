//! For the limit's tests: a directory laid out as `/proc` and `/sys/fs/cgroup` are, so that no test
//! reads or changes the machine's own cgroups.

pub(crate) const GIB: u64 = 1 << 30;

/// A directory laid out as `/proc` and `/sys/fs/cgroup` are, removed on drop.
pub(crate) struct Root(pub(crate) std::path::PathBuf);

impl Root {
    pub(crate) fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("frag-limit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let root = Self(dir);
        root.write("proc/meminfo", "MemTotal:       16384000 kB\nMemFree:  1 kB\n");
        root
    }
    pub(crate) fn write(&self, path: &str, text: &str) {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    /// A cgroup directory with this process as its member.
    pub(crate) fn member(&self, dir: &str) {
        self.write(&format!("{dir}/cgroup.procs"), &format!("1\n{}\n", std::process::id()));
    }
    pub(crate) fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The cgroup v2 layout of a process in `app`, with `max` as its `memory.max`.
pub(crate) fn v2_app(r: &Root, max: &[u8]) {
    r.write("proc/self/cgroup", "0::/app\n");
    r.member("sys/fs/cgroup/app");
    r.write("sys/fs/cgroup/app/memory.current", "123\n");
    r.write("sys/fs/cgroup/app/memory.high", "max\n");
    std::fs::write(r.0.join("sys/fs/cgroup/app/memory.max"), max).unwrap();
}
