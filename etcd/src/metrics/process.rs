// The Prometheus process collector's series (process_resident_memory_bytes and friends), read
// from /proc as Go's client does; `etcdctl check datascale` reads the resident size from here.

use std::fs;

use super::registry::Exposition;

/// Adds the process_* families; any that cannot be read (no /proc) are left out, not faked.
pub fn render(e: &mut Exposition) {
    // Safety: sysconf only reads configuration values.
    let (tick, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if let Some(stat) = read_stat() {
        if tick > 0 {
            e.single(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                "counter",
                (stat.utime + stat.stime) as f64 / tick as f64,
            );
            if let Some(boot) = boot_time() {
                e.single(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    "gauge",
                    boot as f64 + stat.start_ticks as f64 / tick as f64,
                );
            }
        }
        e.single(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            "gauge",
            stat.vsize as f64,
        );
        if page > 0 {
            e.single(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                "gauge",
                (stat.rss_pages * page as u64) as f64,
            );
        }
    }
    if let Ok(dir) = fs::read_dir("/proc/self/fd") {
        let used = dir.count() as f64;
        e.single(
            "process_open_fds",
            "Number of open file descriptors.",
            "gauge",
            used,
        );
        // etcd's own pair (its runtime monitor), next to the client library's.
        e.single(
            "os_fd_used",
            "The number of used file descriptors.",
            "gauge",
            used,
        );
    }
    let limits = fs::read_to_string("/proc/self/limits").unwrap_or_default();
    if let Some(v) = soft_limit(&limits, "Max open files") {
        e.single(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            "gauge",
            v,
        );
        e.single("os_fd_limit", "The file descriptor limit.", "gauge", v);
    }
    if let Some(v) = soft_limit(&limits, "Max address space") {
        e.single(
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            "gauge",
            v,
        );
    }
}

struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

/// /proc/self/stat; the command name may hold spaces, so fields are counted after its ')'.
fn read_stat() -> Option<Stat> {
    let text = fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    // After ')': field 3 (state) is index 0, so field n is index n - 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: num(14)?,
        stime: num(15)?,
        start_ticks: num(22)?,
        vsize: num(23)?,
        rss_pages: num(24)?,
    })
}

fn boot_time() -> Option<u64> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit on the /proc/self/limits line `name`; "unlimited" is u64::MAX, as Go reports.
fn soft_limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        Some(u64::MAX as f64)
    } else {
        soft.parse::<u64>().ok().map(|v| v as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let mut e = Exposition::default();
        render(&mut e);
        let text = e.render();
        for name in [
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_cpu_seconds_total",
            "process_start_time_seconds",
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing in:\n{text}"));
            let v: f64 = line[name.len() + 1..].parse().expect("a number");
            // A process this young may not have used a whole clock tick of CPU yet.
            if name == "process_cpu_seconds_total" {
                assert!(v >= 0.0, "{line}");
            } else {
                assert!(v > 0.0, "{line}");
            }
        }
    }

    #[test]
    fn limits_parse_as_go_reports_them() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n\
                      Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(soft_limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(
            soft_limit(limits, "Max address space"),
            Some(1.8446744073709552e19)
        );
        assert_eq!(soft_limit(limits, "Max processes"), None);
    }
}
