//! Printing audits: a human table, the JSON contract, and Prometheus'
//! textfile format.

mod human;
mod json;
mod prometheus;

pub use human::render as human;
pub use json::render as json;
pub use prometheus::render as prometheus;

/// Bytes in binary units, as lsblk prints them ("1.8T" becomes "1.8 TiB").
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::human_size;

    #[test]
    fn sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1536 << 20), "1.5 GiB");
        assert_eq!(human_size(2_000_398_934_016), "1.8 TiB");
        assert_eq!(human_size(u64::MAX), "16 EiB");
    }
}
