//! LVM2 physical volumes: the PV header after the label (the data area's
//! start, `pe_start`, and the metadata areas), the latest volume-group
//! metadata text in the first metadata area's circular buffer, and from
//! that text the extent size and where each logical volume's first
//! segment lies on this PV.

use super::layers::{Details, Found, Layer};
use super::region::{has, Contents, Kind, Region};
use super::signature::{lvm_crc, lvm_label};
use crate::io::{le_u32, le_u64};

const SECTOR: u64 = 512;
const MDA_MAGIC: &[u8] = b" LVM2 x[5A%r0N*>";
/// The metadata area's header; its circular text buffer follows it.
const MDA_HEADER: u64 = 512;
/// Larger metadata text than this is not worth reading.
const MAX_TEXT: u64 = 4 << 20;
/// Sections nest VG → logical_volumes → LV → segment: allow some slack.
const MAX_NEST: u32 = 8;

/// The PV layer, and a layer per logical volume whose first segment
/// starts on this PV (offsets counted from the PV's data start).
pub(crate) fn found(region: &Region, contents: &Contents) -> (Found, Vec<Found>) {
    let Some(pv) = pv_header(region) else {
        let layer = Layer::new(contents, 0, Details::None {}).note("PV header unreadable");
        return (Found::leaf(layer), Vec::new());
    };
    let vg = pv
        .metadata
        .iter()
        .find_map(|&(at, size)| metadata_text(region, at, size))
        .and_then(|text| VolumeGroup::parse(&text, &pv.uuid));
    let extent = vg.as_ref().and_then(|vg| vg.extent_sectors.checked_mul(SECTOR));
    let data_size = region.size.checked_sub(pv.pe_start);
    let details = Details::LvmPv {
        pe_start_bytes: pv.pe_start,
        extent_bytes: extent,
        vg: vg.as_ref().map(|vg| vg.name.clone()),
    };
    let mut layer = Layer::new(contents, pv.pe_start, details).unit(extent).size(data_size);
    layer.label = vg.as_ref().map(|vg| vg.name.clone());
    if vg.is_none() {
        layer = layer.note("no readable volume-group metadata: logical volumes unknown");
    }
    let lvs = match (&vg, extent) {
        (Some(vg), Some(extent)) => {
            vg.lvs.iter().filter_map(|lv| lv_found(vg, lv, extent)).collect()
        }
        _ => Vec::new(),
    };
    (Found { layer, inner: data_size }, lvs)
}

fn lv_found(vg: &VolumeGroup, lv: &Segment, extent: u64) -> Option<Found> {
    let offset = lv.first_pe.checked_mul(extent)?;
    let size = lv.extents.checked_mul(extent)?;
    let stripe = lv.stripe_sectors.and_then(|s| s.checked_mul(SECTOR));
    let contents = Contents {
        kind: Kind::LvmLv,
        name: "lvm",
        label: Some(format!("{}/{}", vg.name, lv.name)),
        size_bytes: Some(size),
    };
    let details = Details::LvmLv {
        vg: vg.name.clone(),
        lv: lv.name.clone(),
        first_pe: lv.first_pe,
        extents: lv.extents,
        stripes: lv.stripes,
        stripe_bytes: stripe,
    };
    // A striped LV's first bytes are in its first stripe on its first PV.
    let (unit, inner, note) = if lv.stripes > 1 {
        (stripe, stripe.map(|s| s.min(size)), Some("striped: only its first stripe is looked into"))
    } else {
        (Some(extent), Some(size), None)
    };
    let mut layer = Layer::new(&contents, offset, details).size(Some(size)).unit(unit);
    layer.note = note.map(String::from);
    Some(Found { layer, inner })
}

/// What the PV header says.
struct PvHeader {
    /// The PV's UUID as stored: 32 characters, no dashes.
    uuid: String,
    pe_start: u64,
    /// (offset, size) in bytes of each metadata area.
    metadata: Vec<(u64, u64)>,
}

/// The PV header: UUID, device size, then two lists of (offset, size)
/// disk areas, each ended by a zero entry: data areas, metadata areas.
fn pv_header(region: &Region) -> Option<PvHeader> {
    let label = lvm_label(region, &region.bytes(0, 512)?)?;
    let at = usize::try_from(le_u32(&label, 20)?).ok()?;
    let uuid = String::from_utf8_lossy(label.get(at..at.checked_add(32)?)?).into_owned();
    let mut pos = at.checked_add(40)?;
    let mut areas = || {
        let mut list = Vec::new();
        loop {
            let (offset, size) = (le_u64(&label, pos)?, le_u64(&label, pos.checked_add(8)?)?);
            pos = pos.checked_add(16)?;
            if offset == 0 {
                return Some(list);
            }
            list.push((offset, size));
        }
    };
    let data = areas()?;
    let metadata = areas().unwrap_or_default();
    Some(PvHeader { uuid, pe_start: data.first()?.0, metadata })
}

/// The latest metadata text of the area at `at`: its header records its
/// own place and a CRC; the text lies in a circular buffer after it.
fn metadata_text(region: &Region, at: u64, size: u64) -> Option<String> {
    let header = region.bytes(at, 512)?;
    let sound = has(&header, 4, MDA_MAGIC)
        && le_u32(&header, 0) == Some(lvm_crc(header.get(4..)?))
        && le_u64(&header, 24) == Some(at);
    if !sound {
        return None;
    }
    // The first raw location is the committed metadata, unless this area
    // is marked ignored (its text then may be stale).
    let (offset, len, crc) = (le_u64(&header, 40)?, le_u64(&header, 48)?, le_u32(&header, 56)?);
    let ignored = le_u32(&header, 60)? & 1 != 0;
    let buffer = size.checked_sub(MDA_HEADER)?;
    if ignored || offset < MDA_HEADER || offset >= size || len == 0 || len > buffer.min(MAX_TEXT) {
        return None;
    }
    let first = len.min(size - offset);
    let mut text = region.bytes(at.checked_add(offset)?, usize::try_from(first).ok()?)?;
    if first < len {
        let rest = usize::try_from(len - first).ok()?;
        text.extend(region.bytes(at.checked_add(MDA_HEADER)?, rest)?);
    }
    if lvm_crc(&text) != crc {
        return None;
    }
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    text.truncate(end);
    String::from_utf8(text).ok()
}

/// The parts of a volume group's metadata that place data on this PV.
struct VolumeGroup {
    name: String,
    extent_sectors: u64,
    lvs: Vec<Segment>,
}

/// A logical volume's first segment, when it starts on this PV.
struct Segment {
    name: String,
    first_pe: u64,
    extents: u64,
    stripes: u64,
    stripe_sectors: Option<u64>,
}

impl VolumeGroup {
    /// The VG is the top-level section with `physical_volumes`; this PV
    /// is the one whose `id` is `uuid` with dashes.
    fn parse(text: &str, uuid: &str) -> Option<VolumeGroup> {
        let top = Parser::new(text).items(0);
        let (name, vg, pvs) = top.0.iter().find_map(|(name, v)| {
            let vg = v.section()?;
            Some((name, vg, vg.get("physical_volumes")?.section()?))
        })?;
        let ours = pvs.0.iter().find(|(_, pv)| {
            pv.section().and_then(|pv| pv.text("id")).is_some_and(|id| id.replace('-', "") == uuid)
        });
        let pv_name = ours?.0.as_str();
        let lvs = vg.get("logical_volumes").and_then(Value::section);
        let lvs = lvs.map(|lvs| {
            lvs.0
                .iter()
                .filter_map(|(name, lv)| first_segment(name, lv.section()?, pv_name))
                .collect()
        });
        Some(VolumeGroup {
            name: name.clone(),
            extent_sectors: vg.number("extent_size")?,
            lvs: lvs.unwrap_or_default(),
        })
    }
}

/// The segment starting at extent 0, if it is a plain ("striped") one
/// whose first stripe is on `pv`.
fn first_segment(name: &str, lv: &Section, pv: &str) -> Option<Segment> {
    let seg =
        lv.0.iter()
            .filter_map(|(_, v)| v.section())
            .find(|s| s.number("start_extent") == Some(0) && s.get("stripes").is_some())?;
    if seg.text("type")? != "striped" {
        return None;
    }
    let stripes = seg.get("stripes")?.list()?;
    let (first_pv, first_pe) = (stripes.first()?.as_text()?, stripes.get(1)?.as_number()?);
    (first_pv == pv).then(|| Segment {
        name: name.to_string(),
        first_pe,
        extents: seg.number("extent_count").unwrap_or(0),
        stripes: u64::try_from(stripes.len() / 2).unwrap_or(1),
        stripe_sectors: seg.number("stripe_size"),
    })
}

/// LVM's metadata text: `key = value` and `name { … }` items, values
/// being numbers, quoted strings or `[ … ]` lists, `#` comments.
#[derive(Debug, PartialEq)]
enum Value {
    Number(i64),
    Text(String),
    List(Vec<Value>),
    Section(Section),
}

#[derive(Debug, PartialEq)]
struct Section(Vec<(String, Value)>);

impl Section {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn number(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_number()
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_text()
    }
}

impl Value {
    fn section(&self) -> Option<&Section> {
        match self {
            Value::Section(s) => Some(s),
            _ => None,
        }
    }

    fn list(&self) -> Option<&[Value]> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<u64> {
        match self {
            Value::Number(n) => u64::try_from(*n).ok(),
            _ => None,
        }
    }

    fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(t) => Some(t),
            _ => None,
        }
    }
}

/// A tolerant reader: on anything unexpected it stops and keeps what it
/// has read so far.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        Parser { s: text.as_bytes(), at: 0 }
    }

    fn peek(&mut self) -> Option<u8> {
        loop {
            match self.s.get(self.at).copied()? {
                b'#' => {
                    let rest = self.s.get(self.at..)?;
                    self.at += rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
                }
                b if b.is_ascii_whitespace() => self.at += 1,
                b => return Some(b),
            }
        }
    }

    /// Items up to a closing brace or the end.
    fn items(&mut self, depth: u32) -> Section {
        let mut items = Vec::new();
        while let Some(key) = self.word() {
            let value = match self.peek() {
                Some(b'=') => {
                    self.at += 1;
                    self.value(depth)
                }
                Some(b'{') if depth < MAX_NEST => {
                    self.at += 1;
                    let section = self.items(depth + 1);
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                    }
                    Some(Value::Section(section))
                }
                _ => None,
            };
            let Some(value) = value else { break };
            items.push((key, value));
        }
        Section(items)
    }

    /// A bare word: a key or a number.
    fn word(&mut self) -> Option<String> {
        self.peek()?;
        let start = self.at;
        let len = self
            .s
            .get(start..)?
            .iter()
            .position(|b| b"={}[],\"#".contains(b) || b.is_ascii_whitespace());
        let end = start + len.unwrap_or(self.s.len() - start);
        self.at = end;
        (end > start).then(|| String::from_utf8_lossy(&self.s[start..end]).into_owned())
    }

    fn value(&mut self, depth: u32) -> Option<Value> {
        match self.peek()? {
            b'"' => self.string().map(Value::Text),
            b'[' if depth < MAX_NEST => {
                self.at += 1;
                let mut list = Vec::new();
                loop {
                    match self.peek()? {
                        b']' => {
                            self.at += 1;
                            return Some(Value::List(list));
                        }
                        b',' => self.at += 1,
                        _ => list.push(self.value(depth + 1)?),
                    }
                }
            }
            _ => {
                let word = self.word()?;
                Some(word.parse().map(Value::Number).unwrap_or(Value::Text(word)))
            }
        }
    }

    /// A quoted string; a backslash takes the next byte literally.
    fn string(&mut self) -> Option<String> {
        let mut out = Vec::new();
        self.at += 1;
        loop {
            let b = *self.s.get(self.at)?;
            self.at += 1;
            match b {
                b'"' => return Some(String::from_utf8_lossy(&out).into_owned()),
                b'\\' => {
                    out.push(*self.s.get(self.at)?);
                    self.at += 1;
                }
                b => out.push(b),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"vgt {
id = "eVZrom-iYmT"
seqno = 3
status = ["RESIZEABLE", "READ", "WRITE"]
extent_size = 8192	# 4 Megabytes
physical_volumes {
pv0 {
id = "Q3O6zX-vN8M"
device = "/dev/loop0"
pe_start = 2055
}
}
logical_volumes {
lv1 {
segment_count = 1
segment1 {
start_extent = 0
extent_count = 2
type = "striped"
stripe_count = 1
stripes = [
"pv0", 7
]
}
}
thin1 {
segment1 { start_extent = 0
extent_count = 1 type = "thin" }
}
}
}
# Generated by LVM2
contents = "Text Format Volume Group"
version = 1
"#;

    #[test]
    fn reads_extent_size_and_segments() {
        let vg = VolumeGroup::parse(TEXT, "Q3O6zXvN8M").expect("vg");
        assert_eq!((vg.name.as_str(), vg.extent_sectors), ("vgt", 8192));
        assert_eq!(vg.lvs.len(), 1, "the thin LV has no stripes");
        let lv = &vg.lvs[0];
        assert_eq!((lv.name.as_str(), lv.first_pe, lv.extents, lv.stripes), ("lv1", 7, 2, 1));
        assert!(VolumeGroup::parse(TEXT, "someoneelse").is_none());
    }

    /// An update near the end of the circular buffer wraps to its start.
    #[test]
    fn metadata_text_wraps_around_the_buffer() {
        let (at, size) = (4096usize, 8192usize);
        let text = TEXT.as_bytes();
        let offset = size - 100;
        let mut img = vec![0u8; 16384];
        let header = &mut img[at..at + 512];
        header[4..20].copy_from_slice(MDA_MAGIC);
        header[20..24].copy_from_slice(&1u32.to_le_bytes());
        header[24..32].copy_from_slice(&(at as u64).to_le_bytes());
        header[32..40].copy_from_slice(&(size as u64).to_le_bytes());
        header[40..48].copy_from_slice(&(offset as u64).to_le_bytes());
        header[48..56].copy_from_slice(&(text.len() as u64).to_le_bytes());
        header[56..60].copy_from_slice(&lvm_crc(text).to_le_bytes());
        let crc = lvm_crc(&header[4..]);
        header[0..4].copy_from_slice(&crc.to_le_bytes());
        img[at + offset..at + size].copy_from_slice(&text[..100]);
        img[at + 512..at + 512 + text.len() - 100].copy_from_slice(&text[100..]);
        let region = Region { dev: &img, offset: 0, size: img.len() as u64 };
        assert_eq!(metadata_text(&region, at as u64, size as u64).as_deref(), Some(TEXT));
        img[at + 600] ^= 1;
        let region = Region { dev: &img, offset: 0, size: img.len() as u64 };
        assert_eq!(metadata_text(&region, at as u64, size as u64), None, "text CRC");
    }

    proptest::proptest! {
        #[test]
        fn any_text_or_damage_never_panics(
            text in ".{0,400}",
            flips in proptest::collection::vec((0usize..1000, proptest::num::u8::ANY), 0..20),
        ) {
            let _ = VolumeGroup::parse(&text, "Q3O6zXvN8M");
            let mut damaged = TEXT.as_bytes().to_vec();
            for (at, b) in flips {
                let at = at % damaged.len();
                damaged[at] = b;
            }
            let _ = VolumeGroup::parse(&String::from_utf8_lossy(&damaged), "Q3O6zXvN8M");
        }
    }

    #[test]
    fn keeps_what_precedes_damage() {
        let cut = TEXT.find("thin1").expect("thin1");
        for damaged in [TEXT[..cut].to_string(), TEXT.replace("thin1 {", "thin\"1 {")] {
            let vg = VolumeGroup::parse(&damaged, "Q3O6zXvN8M").expect("vg");
            assert_eq!(vg.lvs.len(), 1);
        }
        for cut in 0..TEXT.len() {
            let _ = VolumeGroup::parse(&TEXT[..cut], "Q3O6zXvN8M");
        }
    }
}
