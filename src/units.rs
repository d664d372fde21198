//! Sizes as people type them, read as util-linux reads them.

/// What [`parse_bytes`] accepts, for option help and error messages.
pub const SIZE_SYNTAX: &str =
    "a byte count with an optional suffix: K, M, G, T, P, E or KiB, MiB, \
     ... (powers of 1024); KB, MB, ... (powers of 1000); a fraction such as 1.5GiB is allowed";

/// Parse "4096", "16K", "64MiB", "1.5G", "2TB" as util-linux's strtosize
/// does: K and KiB are 1024, KB is 1000, a fractional part is truncated to
/// whole bytes. None when malformed or too large for a u64.
pub(crate) fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let number_end = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (number, suffix) = t.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let multiplier = multiplier(suffix.trim())?;
    let whole: u64 = whole.parse().ok()?;
    whole.checked_mul(multiplier)?.checked_add(fraction_of(fraction, multiplier)?)
}

/// The value of a suffix: binary unless it ends in a bare "B" after the
/// unit letter ("KB"), as util-linux has it.
fn multiplier(suffix: &str) -> Option<u64> {
    let lower = suffix.to_ascii_lowercase();
    let (letter, base) = match lower.as_bytes() {
        [] | [b'b'] => return Some(1),
        [l] | [l, b'i', b'b'] => (*l, 1024u64),
        [l, b'b'] => (*l, 1000u64),
        _ => return None,
    };
    let power = b"kmgtpe".iter().position(|&u| u == letter)?;
    base.checked_pow(u32::try_from(power).ok()? + 1)
}

/// `0.DIGITS × multiplier`, truncated.
fn fraction_of(digits: &str, multiplier: u64) -> Option<u64> {
    let digits = digits.trim_end_matches('0');
    if digits.is_empty() {
        return Some(0);
    }
    // Beyond 19 digits the fraction can no longer change a u64 result.
    let digits = &digits[..digits.len().min(19)];
    let scale = 10u128.pow(u32::try_from(digits.len()).ok()?);
    let value = u128::from(digits.parse::<u64>().ok()?);
    u64::try_from(value * u128::from(multiplier) / scale).ok()
}

/// Text that is not a size.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a size: {SIZE_SYNTAX}")]
pub struct NotASize(pub String);

/// A clap value parser for byte sizes, with the accepted syntax in its error.
pub fn size_arg(text: &str) -> Result<u64, NotASize> {
    parse_bytes(text).ok_or_else(|| NotASize(text.to_string()))
}

/// A sector size: a power of two from 512 to `max`.
pub(crate) fn is_sector_size(size: u64, max: u64) -> bool {
    size.is_power_of_two() && (512..=max).contains(&size)
}

/// Bytes as lowercase hexadecimal text (checksums, journal records).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

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
    use super::parse_bytes;

    #[test]
    fn binary_and_decimal_suffixes_as_util_linux() {
        let cases = [
            ("4096", 4096),
            ("4096B", 4096),
            (" 16K ", 16 << 10),
            ("16KiB", 16 << 10),
            ("16KB", 16_000),
            ("512M", 512 << 20),
            ("64MiB", 64 << 20),
            ("64mb", 64_000_000),
            ("1GiB", 1 << 30),
            ("1GB", 1_000_000_000),
            ("2T", 2 << 40),
            ("2tb", 2_000_000_000_000),
            ("1P", 1 << 50),
            ("1E", 1 << 60),
            ("1.5GiB", 3 << 29),
            ("1.5KB", 1500),
            ("0.5K", 512),
            ("1.0001K", 1024),
            ("15EiB", 15 << 60),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_bytes(text), Some(bytes), "{text}");
        }
    }

    #[test]
    fn malformed_or_overflowing_sizes_are_refused() {
        for bad in [
            "",
            "MiB",
            ".5K",
            "1..5G",
            "1.5.0G",
            "12 parsecs",
            "99999999999T",
            "-1",
            "16E",
            "1KiBB",
            "1Ki",
            "1Z",
        ] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn long_fractions_truncate_without_overflow() {
        assert_eq!(parse_bytes("1.99999999999999999999999999E"), Some((1 << 61) - 1));
        assert_eq!(parse_bytes("0.000000000000000000001E"), Some(0));
    }
}
