//! The reader on hand-built images: every scheme it dispatches to, and
//! what it reports.

mod read {
    use super::super::fixtures::*;
    use super::super::*;
    use crate::device::SectorGuess;

    fn problems(layout: &Layout) -> Vec<&'static str> {
        layout.problems.iter().map(|p| p.code).collect()
    }

    fn read_img(img: &[u8], ss: u64) -> Layout {
        read(&img.to_vec(), ss, img.len() as u64).unwrap()
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // a list of one range
    fn free_ranges_skip_partitions_extended_and_the_boot_gap() {
        let mbr = read_img(&mbr_extended(), 512);
        assert_eq!(mbr.free_ranges(512 * 512), [320 * 512..512 * 512]);
        let gpt =
            read_img(&gpt_image(512, 4096, 128, &[(2048, 2099, "a"), (3000, 3099, "b")]), 512);
        let last = gpt.gpt.as_ref().unwrap().last_usable_lba;
        assert_eq!(
            gpt.free_ranges(4096 * 512),
            [2100 * 512..3000 * 512, 3100 * 512..(last + 1) * 512]
        );
        assert!(read_img(&[0u8; 8192], 512).free_ranges(8192).is_empty());
    }

    #[test]
    fn blank_disk_has_no_label() {
        let layout = read_img(&[0u8; 8192], 512);
        assert_eq!(layout.label, Label::None);
        assert!(layout.partitions.is_empty() && layout.problems.is_empty());
        assert_eq!(read_img(&[], 512).label, Label::None);
    }

    #[test]
    fn bad_sector_size() {
        for ss in [0, 256, 768, 8192] {
            assert!(
                matches!(read(&vec![0u8; 512], ss, 512), Err(TableError::SectorSize(s)) if s == ss)
            );
        }
    }

    #[test]
    fn mbr_primaries_keep_slot_numbers() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        mbr_entry(&mut img, 0, 2, 0x07, 3048, 1048);
        edit_record(&mut img, 0, |m| m.disk_signature = 0xDEAD_BEEF);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Mbr);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<_> = layout
            .partitions
            .iter()
            .map(|p| (p.number, p.start, p.size, p.type_id.as_str()))
            .collect();
        assert_eq!(got, [(1, 2048, 1000, "0x83"), (3, 3048, 1048, "0x07")]);
        assert_eq!(layout.mbr.unwrap().disk_signature, 0xDEAD_BEEF);
    }

    #[test]
    fn mbr_overlap_and_beyond_end() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        mbr_entry(&mut img, 0, 1, 0x83, 2500, 1000);
        mbr_entry(&mut img, 0, 2, 0x83, 4000, 1000);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["beyond_end", "overlap"]);
        assert!(layout.problems[1].message.contains("partitions 1 "));
    }

    #[test]
    fn extended_with_three_logicals() {
        let layout = read_img(&mbr_extended(), 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<_> =
            layout.partitions.iter().map(|p| (p.number, p.start, p.size, p.kind, p.ebr)).collect();
        assert_eq!(
            got,
            [
                (1, 1, 63, PartKind::Primary, None),
                (2, 64, 256, PartKind::Extended, None),
                (5, 65, 63, PartKind::Logical, Some(64)),
                (6, 129, 63, PartKind::Logical, Some(128)),
                (7, 193, 100, PartKind::Logical, Some(192)),
            ]
        );
        assert_eq!(layout.partitions[1].type_id, "0x05");
        assert_eq!(layout.mbr.unwrap().ebrs, [64, 128, 192]);
    }

    #[test]
    fn extended_overlapping_primary() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 0, 2, 0x83, 300, 50);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["overlap"]);
        assert!(layout.problems[0].message.contains("partitions 2 "));
    }

    #[test]
    fn ebr_loop_is_caught() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 192 * 512, 1, 0x05, 64, 64); // third EBR links to the second
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["ebr_loop"]);
        assert_eq!(layout.partitions.len(), 5);
    }

    #[test]
    fn logical_outside_extended() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 192 * 512, 0, 0x83, 1, 200);
        assert_eq!(problems(&read_img(&img, 512)), ["logical_outside_extended"]);
    }

    #[test]
    fn ebr_chain_too_long() {
        let n = mbr::MAX_EBRS + 10;
        let mut img = vec![0u8; (n + 2) * 512];
        mbr_entry(&mut img, 0, 0, 0x05, 1, n as u32);
        for i in 0..n {
            mbr_entry(&mut img, (i + 1) * 512, 1, 0x05, i as u32 + 1, 1);
        }
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["ebr_chain_too_long"]);
        assert_eq!(layout.mbr.unwrap().ebrs.len(), mbr::MAX_EBRS);
    }

    #[test]
    fn ebr_without_signature_stops_chain() {
        let mut img = mbr_extended();
        img[128 * 512 + 510] = 0;
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["ebr_bad_signature"]);
        assert_eq!(layout.mbr.unwrap().ebrs, [64]);
    }

    #[test]
    fn ebr_link_outside_extended() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 192 * 512, 1, 0x05, 4000, 64);
        // Linux follows the link anyway; here it leads past the end.
        assert_eq!(problems(&read_img(&img, 512)), ["ebr_link_outside", "ebr_beyond_end"]);
    }

    fn numbered(layout: &Layout) -> Vec<(u32, u64, u64)> {
        layout.partitions.iter().map(|p| (p.number, p.start, p.size)).collect()
    }

    #[test]
    fn type_zero_entries_with_sectors_are_partitions() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x00, 0, 2048);
        mbr_entry(&mut img, 0, 1, 0xEF, 2048, 1024);
        mbr_entry(&mut img, 0, 2, 0x00, 0, 0);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Mbr);
        assert_eq!(numbered(&layout), [(1, 0, 2048), (2, 2048, 1024)]);
    }

    #[test]
    fn ebr_with_two_data_entries_and_garbage_in_slot_four() {
        let mut img = mbr_extended();
        // The first EBR describes 65+30 and 100+20; slot 4 holds garbage
        // past the extended partition's end.
        mbr_entry(&mut img, 64 * 512, 0, 0x83, 1, 30);
        mbr_entry(&mut img, 64 * 512, 2, 0x83, 36, 20);
        mbr_entry(&mut img, 64 * 512, 3, 0x83, 5000, 20);
        let layout = read_img(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let logicals: Vec<_> = numbered(&layout).into_iter().filter(|&(n, _, _)| n >= 5).collect();
        assert_eq!(logicals, [(5, 65, 30), (6, 100, 20), (7, 129, 63), (8, 193, 100)]);
    }

    #[test]
    fn two_extended_partitions_number_on() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 0, 3, 0x0F, 320, 128);
        mbr_entry(&mut img, 320 * 512, 0, 0x83, 2, 100);
        let layout = read_img(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(
            numbered(&layout),
            [
                (1, 1, 63),
                (2, 64, 256),
                (4, 320, 128),
                (5, 65, 63),
                (6, 129, 63),
                (7, 193, 100),
                (8, 322, 100)
            ]
        );
        assert_eq!(layout.mbr.unwrap().ebrs, [64, 128, 192, 320]);
    }

    #[test]
    fn bad_boot_indicator_is_not_an_mbr() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        edit_record(&mut img, 0, |m| m.entries[1].boot = 0x41); // boot code, not an indicator
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::None);
        assert!(layout.partitions.is_empty());
    }

    #[test]
    fn an_mbr_alone_is_read_for_what_it_holds() {
        let mut img = vec![0u8; 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        let layout = read_img(&img, 512);
        assert_eq!(numbered(&layout), [(1, 2048, 1000)]);
        assert_eq!(problems(&layout), ["beyond_end"]);
        assert_eq!(read_img(&img, 4096).partitions.len(), 1);
        assert_eq!(problems(&read_img(&img[..300], 512)), ["too_small"]);
    }

    #[test]
    fn a_4kn_mbr_image_reads_as_4096() {
        // 1 MiB as 4096-byte sectors: an extended partition at 64 whose EBR
        // is at byte 64 * 4096; read as 512, LBA 64 holds no EBR.
        let mut img = vec![0u8; 1 << 20];
        mbr_entry(&mut img, 0, 0, 0x05, 64, 128);
        mbr_entry(&mut img, 64 * 4096, 0, 0x83, 1, 100);
        let guess = detect_sector_size(&img, img.len() as u64);
        assert!(matches!(guess, SectorGuess::Known(4096, Some(_))), "{guess:?}");
        let mut img = vec![0u8; 1 << 20];
        mbr_entry(&mut img, 0, 0, 0x83, 64, 128);
        let guess = detect_sector_size(&img, img.len() as u64);
        assert!(matches!(guess, SectorGuess::Unsure(_)), "{guess:?}");
    }

    #[test]
    fn empty_extended_is_fine() {
        let mut img = vec![0u8; 512 * 512];
        mbr_entry(&mut img, 0, 1, 0x0F, 64, 256);
        mbr::sign(&mut img[64 * 512..]);
        let layout = read_img(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(layout.partitions.len(), 1);
        assert_eq!(layout.mbr.unwrap().ebrs, [64]);
    }

    #[test]
    fn gpt_valid_at_512_and_4096() {
        for ss in [512, 4096] {
            let img = gpt_image(ss, 256, 128, &[(40, 99, "root"), (100, 199, "")]);
            let layout = read_img(&img, ss);
            assert_eq!(layout.label, Label::Gpt);
            assert!(layout.problems.is_empty(), "{ss}: {:?}", layout.problems);
            let got: Vec<_> = layout
                .partitions
                .iter()
                .map(|p| (p.number, p.start, p.size, p.name.as_deref()))
                .collect();
            assert_eq!(got, [(1, 40, 60, Some("root")), (2, 100, 100, None)]);
            assert_eq!(layout.partitions[0].type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
            let gpt = layout.gpt.unwrap();
            assert_eq!((gpt.header_lba, gpt.alternate_lba, gpt.used_backup), (1, 255, false));
            assert_eq!((gpt.entry_count, gpt.entry_size, gpt.entries_lba), (128, 128, 2));
            assert_eq!(gpt.disk_guid, "07070707-0707-0707-0707-070707070707");
            let mbr = layout.mbr.unwrap();
            assert!(mbr.protective && !mbr.hybrid);
        }
    }

    #[test]
    fn gpt_entry_size_256() {
        let img = gpt_image(512, 256, 256, &[(100, 149, "a"), (150, 159, "b")]);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_entry_size"]);
        assert_eq!(layout.partitions.len(), 2);
        assert_eq!(layout.partitions[1].name.as_deref(), Some("b"));
    }

    #[test]
    fn corrupt_primary_uses_backup() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[512 + 40] ^= 1;
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_primary_invalid"]);
        assert!(
            layout.problems[0].message.contains("CRC mismatch"),
            "{}",
            layout.problems[0].message
        );
        assert!(layout.problems[0].message.contains("backup at LBA 255"));
        let gpt = layout.gpt.unwrap();
        assert!(gpt.used_backup);
        assert_eq!((gpt.header_lba, gpt.alternate_lba), (255, 1));
        assert_eq!(layout.partitions[0].start, 40);
    }

    #[test]
    fn both_corrupt_is_unusable() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[512 + 40] ^= 1;
        img[255 * 512 + 40] ^= 1;
        use crate::table::gpt::{CopyError::Header, HeaderError::Crc};
        let err = read(&img, 512, img.len() as u64).unwrap_err();
        let crc = |e: &_| matches!(e, Header(Crc { .. }));
        assert!(
            matches!(err, TableError::Unusable { ref primary, backup_lba: 255, ref backup }
                if crc(primary) && crc(backup)),
            "{err}"
        );
        let text = err.to_string();
        let primary = "primary GPT at LBA 1: header CRC mismatch (stored 0x";
        let start = format!("corrupt partition table with no usable copy: {primary}");
        assert!(text.starts_with(&start), "{text}");
        assert!(
            text.contains("); backup GPT at LBA 255: header CRC mismatch (stored 0x"),
            "{text}"
        );
    }

    #[test]
    fn corrupt_entries_crc_uses_backup() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[2 * 512 + 33] ^= 1;
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_primary_invalid"]);
        assert!(layout.problems[0].message.contains("entry array CRC"));
    }

    #[test]
    fn corrupt_backup_is_reported() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[255 * 512] = b'X';
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_backup_invalid"]);
    }

    #[test]
    fn wrong_alternate_lba_does_not_hide_the_backup() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        edit_header(&mut img, 512, 1, |h| h.alternate_lba = 100);
        let layout = read_img(&img, 512);
        assert!(problems(&layout).contains(&"gpt_alternate_lba_wrong"), "{:?}", layout.problems);
        assert!(!problems(&layout).contains(&"gpt_backup_invalid"));
    }

    #[test]
    fn ebr_slots_are_read_by_type_not_position() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 64 * 512, 0, 0x05, 64, 64);
        mbr_entry(&mut img, 64 * 512, 1, 0x83, 1, 63);
        assert_eq!(read_img(&img, 512).partitions, read_img(&mbr_extended(), 512).partitions);
    }

    #[test]
    fn differing_backup_is_reported() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        edit_header(&mut img, 512, 255, |h| h.disk_guid.0[0] ^= 1);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_backup_differs"]);
        assert!(layout.problems[0].message.contains("disk GUID"));
    }

    #[test]
    fn grown_image_leaves_backup_behind() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img.resize(512 * 512, 0);
        assert_eq!(problems(&read_img(&img, 512)), ["gpt_backup_not_at_end"]);
    }

    #[test]
    fn hybrid_mbr() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        mbr_entry(&mut img, 0, 1, 0x83, 40, 60);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["hybrid_mbr"]);
        let mbr = layout.mbr.unwrap();
        assert!(mbr.hybrid && !mbr.protective);
        assert_eq!(layout.partitions.len(), 1);
    }

    #[test]
    fn mbr_with_partitions_wins_over_a_stale_gpt() {
        let mut img = gpt_image(512, 4096, 128, &[(2048, 2099, "a")]);
        mbr_entry(&mut img, 0, 0, 0x83, 63, 1000);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Mbr);
        assert_eq!((layout.partitions[0].start, layout.partitions[0].size), (63, 1000));
        assert_eq!(problems(&layout), ["stale_gpt"]);
    }

    #[test]
    fn gpt_without_protective_mbr() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[..512].fill(0);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Gpt);
        assert_eq!(problems(&layout), ["gpt_without_protective_mbr"]);
        assert!(layout.mbr.is_none());
    }

    #[test]
    fn gpt_entry_problems() {
        let parts =
            [(40, 99, "a"), (90, 120, "b"), (10, 20, "c"), (150, 140, "d"), (200, 300, "e")];
        let layout = read_img(&gpt_image(512, 256, 128, &parts), 512);
        let mut codes = problems(&layout);
        codes.sort_unstable();
        assert_eq!(
            codes,
            ["beyond_end", "gpt_entry_inverted", "outside_usable", "outside_usable", "overlap"]
        );
        let numbers: Vec<_> = layout.partitions.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [1, 2, 3, 5]);
    }

    #[test]
    fn sector_size_detection() {
        let img = gpt_image(512, 256, 128, &[]);
        assert_eq!(detect_sector_size(&img, img.len() as u64), SectorGuess::Known(512, None));
        let img = gpt_image(4096, 64, 128, &[]);
        assert_eq!(detect_sector_size(&img, img.len() as u64), SectorGuess::Known(4096, None));
        assert_eq!(detect_sector_size(&vec![0u8; 8192], 8192), SectorGuess::Unknown);
        assert_eq!(detect_sector_size(&vec![0u8; 100], 100), SectorGuess::Unknown);
    }

    #[test]
    fn wrong_sector_size_sees_no_gpt_header() {
        // A 4096-byte GPT read as 512: the 0xEE guard says GPT, LBA 1 holds nothing.
        let img = gpt_image(4096, 64, 128, &[]);
        assert!(matches!(read(&img, 512, img.len() as u64), Err(TableError::Unusable { .. })));
    }
}

mod prop {
    use super::super::fixtures::*;
    use super::super::*;
    use proptest::prelude::*;

    fn sector_size() -> impl Strategy<Value = u64> {
        prop_oneof![Just(512u64), Just(1024), Just(2048), Just(4096)]
    }

    /// Offsets inside the boot records, headers and entry arrays, where a
    /// flipped byte changes what the reader does.
    fn hot_offset(len: usize) -> impl Strategy<Value = usize> {
        prop_oneof![0..1024usize, 1024..3072usize, (len - 512)..len, 0..len]
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
            ss in sector_size(),
            extra in 0u64..1 << 40,
            signed in any::<bool>(),
        ) {
            let mut bytes = bytes;
            if signed && bytes.len() >= 512 {
                bytes[510..512].copy_from_slice(&[0x55, 0xAA]);
            }
            for size in [bytes.len() as u64, bytes.len() as u64 + extra, extra] {
                let _ = read(&bytes, ss, size);
                let _ = detect_sector_size(&bytes, size);
            }
        }

        #[test]
        fn mutated_gpt_never_panics(
            muts in proptest::collection::vec((hot_offset(128 * 512), any::<u8>()), 1..8),
            reseal_headers in any::<bool>(),
            ss in sector_size(),
        ) {
            let mut img = gpt_image(512, 128, 128, &[(34, 60, "a"), (61, 94, "b")]);
            for (at, byte) in muts {
                img[at] = byte;
            }
            if reseal_headers {
                reseal(&mut img, 512, 1);
                reseal(&mut img, 512, 127);
            }
            let _ = read(&img, ss, img.len() as u64);
            let _ = read(&img, 512, img.len() as u64);
        }

        #[test]
        fn mutated_mbr_never_panics(
            muts in proptest::collection::vec(
                (prop_oneof![Just(0usize), Just(64), Just(128), Just(192)], 440..512usize, any::<u8>()),
                1..8,
            ),
            ss in sector_size(),
        ) {
            let mut img = mbr_extended();
            for (sector, at, byte) in muts {
                img[sector * 512 + at] = byte;
            }
            let _ = read(&img, ss, img.len() as u64);
            let _ = read(&img, 512, img.len() as u64);
        }
    }
}
