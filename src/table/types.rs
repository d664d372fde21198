//! Partition types by name: the common ones by MBR code and GPT type GUID.

/// (names, MBR code, GPT type GUID); the first name is the canonical one.
const TYPES: &[(&[&str], Option<u8>, Option<&str>)] = &[
    (&["linux", "linux-data"], Some(0x83), Some("0FC63DAF-8483-4772-8E79-3D69D8477DE4")),
    (&["swap", "linux-swap"], Some(0x82), Some("0657FD6D-A4AB-43C4-84E5-0933C84B4F4F")),
    (&["efi", "esp", "uefi"], Some(0xef), Some("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")),
    (&["lvm", "linux-lvm"], Some(0x8e), Some("E6D6D379-F507-44C2-A23C-238F2A3DF928")),
    (&["raid", "linux-raid"], Some(0xfd), Some("A19D880F-05FC-4D3B-A006-743F0F84911E")),
    (&["bios-boot", "bios"], None, Some("21686148-6449-6E6F-744E-656564454649")),
    (&["windows", "ntfs", "msdata"], Some(0x07), Some("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7")),
    (&["fat32", "vfat"], Some(0x0c), Some("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7")),
    (&["fat32-chs"], Some(0x0b), None),
    (&["fat16"], Some(0x06), None),
    (&["extended"], Some(0x05), None),
    (&["extended-lba"], Some(0x0f), None),
    (&["extended-linux"], Some(0x85), None),
    (&["gpt-protective"], Some(0xee), None),
    (&["linux-root-x86-64", "root"], None, Some("4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709")),
    (&["linux-home", "home"], None, Some("933AC7E1-2EB4-4F13-B844-0E14E2AEF915")),
    (&["luks"], None, Some("CA7D7CCB-63ED-4C53-861C-1742536059CC")),
    (&["zfs"], Some(0xbf), Some("6A898CC3-1DD2-11B2-99A6-080020736631")),
    (&["freebsd"], Some(0xa5), Some("516E7CB4-6ECF-11D6-8FF8-00022D09712B")),
    (&["apple-hfs", "hfs"], Some(0xaf), Some("48465300-0000-11AA-AA11-00306543ECAC")),
];

/// The MBR code and GPT GUID of a type name (lower case).
pub(crate) fn by_name(name: &str) -> Option<(Option<u8>, Option<&'static str>)> {
    TYPES.iter().find(|(names, _, _)| names.contains(&name)).map(|(_, mbr, gpt)| (*mbr, *gpt))
}

/// An MBR type code as "83" or "0x83" (one or two hex digits, either
/// case); None for anything else and for 0, which marks an unused entry.
pub(crate) fn parse_mbr_code(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text);
    let digits = (1..=2).contains(&hex.len()) && hex.bytes().all(|c| c.is_ascii_hexdigit());
    digits.then(|| u8::from_str_radix(hex, 16).ok()).flatten().filter(|&c| c != 0)
}

/// A short name for a type id as the table reader writes it ("0x83" or an
/// upper-case GUID); None for types we do not name.
pub fn name_of(type_id: &str) -> Option<&'static str> {
    let code = type_id.starts_with("0x").then(|| parse_mbr_code(type_id)).flatten();
    TYPES
        .iter()
        .find(|(_, mbr, gpt)| match code {
            Some(c) => *mbr == Some(c),
            None => gpt.is_some_and(|g| g.eq_ignore_ascii_case(type_id)),
        })
        .map(|(names, _, _)| names[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(name_of("0x83"), Some("linux"));
        assert_eq!(name_of("0x0f"), Some("extended-lba"));
        assert_eq!(name_of("c12a7328-f81f-11d2-ba4b-00a0c93ec93b"), Some("efi"));
        assert_eq!(name_of("0x42"), None);
        assert_eq!(name_of("not a guid"), None);
        assert_eq!(
            by_name("esp"),
            Some((Some(0xef), Some("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")))
        );
        assert_eq!(by_name("bios"), Some((None, Some("21686148-6449-6E6F-744E-656564454649"))));
        assert_eq!(by_name("nonsense"), None);
    }
}
