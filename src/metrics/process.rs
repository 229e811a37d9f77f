//! The process metrics that Prometheus' own client libraries export, under their standard
//! names (no `hookinbox_` prefix), so that the usual dashboards and alerts on
//! `process_resident_memory_bytes` and friends work unchanged. They are read from
//! `/proc/self` at each scrape, which costs a few small reads of kernel memory, never the
//! disk. Linux only: where a file cannot be read or parsed (another system, a sandbox
//! without `/proc`), the metrics it would give are left out of that scrape and the reason
//! is logged at debug; a scrape never fails for them.
//!
//! A small parser rather than a crate: six numbers from three files do not earn a
//! dependency tree.

use std::fmt;

use nix::unistd::{SysconfVar, sysconf};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Registered on the root registry; reads `/proc/self` each time it is encoded.
#[derive(Debug)]
pub struct Collector;

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let sample = Sample::read();
        if let Some(cpu) = sample.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges: [(&str, &str, Option<f64>); 5] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                sample.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                sample.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                sample.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                sample.max_fds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                sample.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        Ok(())
    }
}

/// One reading; `None` where the source file could not be read.
#[derive(Debug, Default)]
struct Sample {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
    start_time_seconds: Option<f64>,
}

impl Sample {
    fn read() -> Sample {
        let mut sample = Sample::default();
        let ticks = sysconf(SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0);
        let page = sysconf(SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .filter(|p| *p > 0);
        match read("/proc/self/stat").and_then(|text| {
            Stat::parse(&text).ok_or_else(|| "unexpected /proc/self/stat".to_owned())
        }) {
            Ok(stat) => {
                sample.virtual_bytes = Some(stat.vsize as f64);
                sample.resident_bytes = page.map(|p| stat.rss_pages as f64 * p as f64);
                if let Some(ticks) = ticks.map(|t| t as f64) {
                    sample.cpu_seconds = Some((stat.utime + stat.stime) as f64 / ticks);
                    // starttime counts from boot; the kernel gives boot as unix seconds.
                    match read("/proc/stat").map(|text| boot_time(&text)) {
                        Ok(Some(boot)) => {
                            sample.start_time_seconds =
                                Some(boot as f64 + stat.start_ticks as f64 / ticks);
                        }
                        Ok(None) => tracing::debug!("no btime line in /proc/stat"),
                        Err(e) => tracing::debug!(error = %e, "process metrics"),
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "process metrics"),
        }
        match std::fs::read_dir("/proc/self/fd") {
            // The directory's own descriptor is among them, as in every client library.
            Ok(entries) => sample.open_fds = Some(entries.count() as f64),
            Err(e) => tracing::debug!(error = %e, "process metrics: reading /proc/self/fd"),
        }
        match read("/proc/self/limits").map(|text| max_open_files(&text)) {
            Ok(Some(max)) => sample.max_fds = Some(max as f64),
            // "unlimited" or a format we do not know: better absent than wrong.
            Ok(None) => tracing::debug!("no finite Max open files in /proc/self/limits"),
            Err(e) => tracing::debug!(error = %e, "process metrics"),
        }
        sample
    }
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))
}

/// The fields of `/proc/self/stat` the metrics use (proc(5): fields 14, 15, 22, 23, 24).
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

impl Stat {
    /// The second field is the command name in parentheses, and the name itself may hold
    /// spaces and parentheses (a thread can name itself anything): the fields after it
    /// begin after the *last* `)`.
    fn parse(text: &str) -> Option<Stat> {
        let (_, rest) = text.rsplit_once(')')?;
        // rest starts at field 3 (state), so field n is at index n - 3.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Stat {
            utime: field(14)?,
            stime: field(15)?,
            start_ticks: field(22)?,
            vsize: field(23)?,
            // Signed in the kernel's format, never negative in practice.
            rss_pages: field(24)?,
        })
    }
}

/// The `btime` line of `/proc/stat`: the boot time in unix seconds.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit on open files from `/proc/self/limits`; `None` when unlimited.
fn max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.strip_prefix("Max open files")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_found_after_the_last_parenthesis_of_the_name() {
        // A command name with spaces and both kinds of parenthesis, as prctl allows.
        let text = "4242 (my (odd) name) R 1 4242 4242 0 -1 4194560 1200 0 0 0 \
                    250 75 0 0 20 0 3 0 98765 123456789 3210 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            Stat::parse(text),
            Some(Stat {
                utime: 250,
                stime: 75,
                start_ticks: 98765,
                vsize: 123456789,
                rss_pages: 3210,
            })
        );
        assert_eq!(Stat::parse("4242 (cut short) R 1 2"), None);
        assert_eq!(Stat::parse("no parenthesis at all"), None);
    }

    #[test]
    fn boot_time_and_the_soft_open_files_limit() {
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        assert_eq!(boot_time("cpu  1 2 3\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63704                63704                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
    }

    /// This process, on Linux: every metric is there and plausible.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_whole() {
        let s = Sample::read();
        assert!(s.resident_bytes.unwrap() > 0.0, "{s:?}");
        assert!(
            s.virtual_bytes.unwrap() >= s.resident_bytes.unwrap(),
            "{s:?}"
        );
        assert!(s.open_fds.unwrap() >= 3.0, "{s:?}");
        assert!(s.max_fds.unwrap() >= s.open_fds.unwrap(), "{s:?}");
        assert!(s.cpu_seconds.unwrap() >= 0.0, "{s:?}");
        let now = crate::clock::unix_f64(std::time::SystemTime::now());
        let start = s.start_time_seconds.unwrap();
        assert!(start > 1_500_000_000.0 && start <= now + 1.0, "{s:?}");
    }
}
