//! A request's type and name as its table stores them: MBR codes, GPT
//! type GUIDs, names only on GPT.

use super::error::PlanError;
use super::request::{NewLabel, PartitionRequest};
use crate::table::gpt::Guid;
use crate::table::{mbr, types};

/// `r` with its type as the table stores it and its name checked.
pub(super) fn resolve(
    label: NewLabel,
    r: &PartitionRequest,
) -> Result<PartitionRequest, PlanError> {
    if let Some(name) = &r.name {
        if label == NewLabel::Mbr {
            return Err(PlanError::Name(name.clone(), "only GPT partitions have names"));
        }
        if name.contains('\0') {
            return Err(PlanError::Name(name.clone(), "holds a NUL, where every reader stops"));
        }
        if name.encode_utf16().count() > 36 {
            return Err(PlanError::Name(
                name.clone(),
                "longer than the 36 UTF-16 units a GPT entry holds",
            ));
        }
    }
    let type_id = resolve_type(label, &r.type_id)?;
    Ok(PartitionRequest { type_id, ..r.clone() })
}

/// The MBR code a TYPE names: a name, or a hex code ("83", "0x83").
pub(super) fn mbr_code(text: &str) -> Option<u8> {
    let t = text.trim().to_ascii_lowercase();
    types::by_name(&t).map_or_else(|| types::parse_mbr_code(&t), |(code, _)| code)
}

/// A TYPE as typed, as its table stores it: "0x83" on MBR, an upper-case
/// GUID on GPT. Names, MBR hex codes ("83", "0x83") and GUIDs are accepted.
pub(crate) fn resolve_type(label: NewLabel, text: &str) -> Result<String, PlanError> {
    let bad = || PlanError::Type(text.to_string(), label);
    let t = text.trim().to_ascii_lowercase();
    match (label, types::by_name(&t)) {
        (NewLabel::Mbr, _) => {
            let code = mbr_code(&t).ok_or_else(bad)?;
            // Written as a partition, Linux would take it for a chain of
            // EBRs or for the guard of a GPT that is not there.
            if code == mbr::TYPE_GPT || mbr::EXTENDED_TYPES.contains(&code) {
                return Err(PlanError::Container(text.to_string()));
            }
            Ok(format!("0x{code:02x}"))
        }
        (NewLabel::Gpt, Some((_, guid))) => guid.map(str::to_string).ok_or_else(bad),
        // Not the all-zero GUID: it marks an unused entry.
        (NewLabel::Gpt, None) => {
            let guid = t.parse::<Guid>().ok().filter(|g| !g.is_zero());
            guid.map(|g| g.to_string()).ok_or_else(bad)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::MIB;
    use crate::plan::tests::{disk, plan_on, req};
    use crate::plan::{Align, Size};

    #[test]
    fn types_resolve_per_label() {
        assert_eq!(resolve_type(NewLabel::Mbr, "linux").unwrap(), "0x83");
        assert_eq!(resolve_type(NewLabel::Mbr, "8E").unwrap(), "0x8e");
        assert_eq!(resolve_type(NewLabel::Mbr, "0x07").unwrap(), "0x07");
        assert_eq!(
            resolve_type(NewLabel::Gpt, "EFI").unwrap(),
            "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
        );
        let guid = "0fc63daf-8483-4772-8e79-3d69d8477de4";
        assert_eq!(resolve_type(NewLabel::Gpt, guid).unwrap(), guid.to_ascii_uppercase());
        for (label, bad) in [
            (NewLabel::Mbr, "bios-boot"),
            (NewLabel::Mbr, "0"),
            (NewLabel::Mbr, "183"),
            (NewLabel::Gpt, "83"),
            (NewLabel::Gpt, "00000000-0000-0000-0000-000000000000"),
        ] {
            assert!(matches!(resolve_type(label, bad), Err(PlanError::Type(..))), "{bad}");
        }
        for container in ["5", "0x0f", "85", "extended", "ee", "0xEE"] {
            let got = resolve_type(NewLabel::Mbr, container);
            assert!(matches!(got, Err(PlanError::Container(..))), "{container}: {got:?}");
        }
    }

    #[test]
    fn names_only_on_gpt_and_short() {
        let named = |n: &str| PartitionRequest { name: Some(n.into()), ..req(Size::Rest) };
        let d = disk(64 * MIB, 512);
        assert!(matches!(
            plan_on(&d, NewLabel::Mbr, Align::Optimal, false, &[named("a")]),
            Err(PlanError::Name(..))
        ));
        assert!(matches!(
            plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &[named(&"x".repeat(37))]),
            Err(PlanError::Name(..))
        ));
        assert!(matches!(
            plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &[named("root\0disk")]),
            Err(PlanError::Name(..))
        ));
        let p = plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &[named("root")]).unwrap();
        assert_eq!(p.partitions[0].name.as_deref(), Some("root"));
        assert_eq!(p.partitions[0].type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
    }

    #[test]
    fn mbr_codes_parse() {
        assert_eq!(types::parse_mbr_code("83"), Some(0x83));
        assert_eq!(types::parse_mbr_code("0x0c"), Some(0x0c));
        assert_eq!(types::parse_mbr_code("0XEF"), Some(0xef));
        assert_eq!(types::parse_mbr_code("7"), Some(7));
        for bad in ["0", "0x00", "0x", "", "183", "0x183", "+8", "g1", "linux"] {
            assert_eq!(types::parse_mbr_code(bad), None, "{bad}");
        }
    }
}
