//! Drive models known to report 512-byte physical sectors while writing
//! 4096-byte sectors inside (first-generation Advanced Format drives).
//!
//! Patterns match the model as sysfs shows it (device/model, without the
//! vendor). libata truncates that to 16 characters, so patterns end in `*`.

/// A drive family that misreports its physical sector size.
#[derive(Debug, PartialEq, Eq)]
pub struct Quirk {
    /// Model glob: `*` any run, `?` one character, ASCII case ignored.
    pub pattern: &'static str,
    /// The family, for notes.
    pub family: &'static str,
    /// The physical sector size the drive really uses.
    pub physical: u64,
}

const fn af(pattern: &'static str, family: &'static str) -> Quirk {
    Quirk { pattern, family, physical: 4096 }
}

pub(crate) const QUIRKS: &[Quirk] = &[
    af("WDC WD*EARS*", "WD Caviar Green EARS"),
    af("WDC WD*EARX*", "WD Caviar Green EARX"),
    af("WDC WD*AARS*", "WD Caviar Green AARS"),
    af("WDC WD*EURS*", "WD AV-GP EURS"),
    af("WDC WD*BPVT*", "WD Scorpio Blue BPVT"),
    af("WDC WD*LPVT*", "WD Scorpio Blue LPVT"),
    af("SAMSUNG HD204UI*", "Samsung EcoGreen F4 HD204UI"),
    af("SAMSUNG HD155UI*", "Samsung EcoGreen F4 HD155UI"),
    af("ST*DL003*", "Seagate Barracuda Green DL003"),
    af("ST*DM001*", "Seagate Barracuda 7200.14 DM001"),
];

/// The quirk for a model string, if it belongs to a known family.
pub(crate) fn quirk_for(model: &str) -> Option<&'static Quirk> {
    let model = model.trim().as_bytes();
    QUIRKS.iter().find(|q| glob_match(q.pattern.as_bytes(), model))
}

/// Greedy glob match remembering only the last `*`, which is enough for
/// `*` and `?` and never backtracks more than linearly per star.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = text.get(t) {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&want) if want == b'?' || want.eq_ignore_ascii_case(&c) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                // Let the last star swallow one more character and retry.
                Some((star_p, star_t)) => {
                    star = Some((star_p, star_t + 1));
                    p = star_p + 1;
                    t = star_t + 1;
                }
                None => return false,
            },
        }
    }
    pattern.get(p..).is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_generation_advanced_format_drives_match() {
        for model in [
            "WDC WD20EARS-00MVWB0",
            "WDC WD20EARS-00M", // as libata truncates it
            "WDC WD15EARS-00Z5B1",
            "WDC WD10EARS-00Y5B1",
            "WDC WD6400AARS-00Y5B1",
            "WDC WD20EARX-00PASB0",
            "WDC WD20EURS-63S48Y0",
            "WDC WD7500BPVT-22HXZT3",
            "WDC WD5000LPVT-22G33T0",
            "SAMSUNG HD204UI",
            "SAMSUNG HD155UI",
            "ST2000DL003-9VT166",
            "ST3000DM001-9YN166",
            "  wdc wd20ears-00mvwb0  ",
        ] {
            let quirk = quirk_for(model).unwrap_or_else(|| panic!("{model} should match"));
            assert_eq!(quirk.physical, 4096, "{model}");
        }
    }

    #[test]
    fn native_512_and_honest_drives_do_not_match() {
        for model in [
            "WDC WD20EADS-00S2B0",  // 512-byte native Caviar Green
            "WDC WD20EZRZ-00Z5HB0", // reports its 4096-byte sectors itself
            "WDC WD40EFRX-68N32N0",
            "ST2000DM008-2FR102",
            "ST4000NM0025",
            "SAMSUNG HD203WI",
            "Samsung SSD 970 EVO Plus 1TB",
            "Generic",
            "",
        ] {
            assert_eq!(quirk_for(model), None, "{model}");
        }
    }

    #[test]
    fn glob_handles_stars_and_question_marks() {
        assert!(glob_match(b"a*b*c", b"axxbyyc"));
        assert!(glob_match(b"a?c", b"abc"));
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"a*", b"a"));
        assert!(!glob_match(b"a?c", b"ac"));
        assert!(!glob_match(b"a*b", b"aXbX"));
        assert!(!glob_match(b"", b"a"));
    }
}
