//! Sizes as people type them.

/// Parse "4096", "16K", "512M", "64MiB", "1GiB", "2T": suffixes are binary,
/// and "KB" means KiB as fdisk and losetup read it. None when malformed or
/// too large for a u64.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        "t" | "tib" | "tb" => 40,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// A sector size: a power of two from 512 to `max`.
pub fn is_sector_size(size: u64, max: u64) -> bool {
    size.is_power_of_two() && (512..=max).contains(&size)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
        assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes(" 16K "), Some(16384));
        assert_eq!(parse_bytes("2tb"), Some(2 << 40));
        for bad in ["", "MiB", "1.5G", "12 parsecs", "99999999999T", "-1"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
