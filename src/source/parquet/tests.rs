//! Tests of the Parquet format: files written by the `parquet` crate's own writer in Hugging Face's layout
//! (several row groups, each codec we read, dictionary on and off) read back through the record store; every
//! kind of damage at open and at decode; a proptest that flips and truncates bytes of a real file.

use super::decode::Span;
use super::*;
use crate::error::ImageErrorKind;
use crate::source::records::{RecordFiles, Value, record_dataset};
use crate::source::{Dataset, PartialOptions, ReadCtx};
use bytes::Bytes;
use parquet::basic::{BrotliLevel, GzipLevel, ZstdLevel};
use parquet::data_type::{BoolType, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::data_type::{ByteArray, FixedLenByteArray};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::metadata::{KeyValue, ParquetMetaDataWriter};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use proptest::prelude::*;
use std::path::Path;

/// Hugging Face's layout (`datasets` 5: Image struct, ClassLabel int64, a string) plus a double and a list.
const HF_SCHEMA: &str = "message schema {
  optional group image { optional binary bytes; optional binary path (STRING); }
  optional int64 label;
  optional binary text (STRING);
  optional double score;
  optional group tags (LIST) { repeated group list { optional binary element (STRING); } }
}";

const HF_JSON: &str = r#"{"info": {"features": {"image": {"_type": "Image"}, "label": {"names": ["cat", "dog", "b\u00efrd"], "_type": "ClassLabel"}, "text": {"dtype": "string", "_type": "Value"}}}, "fingerprint": [1, {"x": null}]}"#;

#[derive(Debug, Clone)]
struct Row {
    /// None: the struct is null; Some(None): bytes null, path set.
    image: Option<Option<Vec<u8>>>,
    label: Option<i64>,
    text: Option<String>,
    score: Option<f64>,
    tags: Option<Vec<Option<String>>>,
}

fn image_bytes(i: usize) -> Vec<u8> {
    let mut b = vec![0xff, 0xd8, 0xff, 0xe0];
    b.extend((0..(50 + i * 37) % 3000).map(|k| (k * 7 + i) as u8));
    b
}

fn sample_rows(n: usize) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            image: match i {
                5 => Some(None),
                9 => None,
                _ => Some(Some(image_bytes(i))),
            },
            label: if i == 4 { None } else { Some((i % 3) as i64) },
            text: if i % 7 == 3 { None } else { Some(format!("caption {i} {}", "ü".repeat(i % 4))) },
            score: if i % 5 == 2 { None } else { Some(i as f64 * 0.5) },
            tags: match i % 4 {
                0 => None,
                1 => Some(Vec::new()),
                2 => Some(vec![Some(format!("t{i}")), None, Some("x".into())]),
                _ => Some(vec![Some("solo".into())]),
            },
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct Opts {
    compression: Compression,
    dictionary: bool,
    group_rows: usize,
}

fn props(o: Opts, kv: Option<&str>) -> Arc<WriterProperties> {
    let kv = kv.map(|v| vec![KeyValue::new("huggingface".into(), v.to_string())]);
    Arc::new(
        WriterProperties::builder()
            .set_compression(o.compression)
            .set_dictionary_enabled(o.dictionary)
            .set_key_value_metadata(kv)
            .set_data_page_size_limit(2048)
            .build(),
    )
}

/// `rows` in Hugging Face's layout, `o.group_rows` rows per row group.
fn write_hf(rows: &[Row], o: Opts) -> Vec<u8> {
    let schema = Arc::new(parse_message_type(HF_SCHEMA).unwrap());
    let mut buf = Vec::new();
    let mut w = SerializedFileWriter::new(&mut buf, schema, props(o, Some(HF_JSON))).unwrap();
    for chunk in rows.chunks(o.group_rows) {
        let mut rg = w.next_row_group().unwrap();
        let mut k = 0;
        while let Some(mut col) = rg.next_column().unwrap() {
            match k {
                0 => {
                    let defs: Vec<i16> =
                        chunk.iter().map(|r| r.image.as_ref().map_or(0, |b| 1 + b.is_some() as i16)).collect();
                    let vals: Vec<ByteArray> =
                        chunk.iter().filter_map(|r| r.image.clone().flatten()).map(ByteArray::from).collect();
                    col.typed::<ByteArrayType>().write_batch(&vals, Some(&defs[..]), None).unwrap();
                }
                1 => {
                    let defs: Vec<i16> =
                        chunk.iter().map(|r| r.image.as_ref().map_or(0, |b| 1 + b.is_none() as i16)).collect();
                    let vals: Vec<ByteArray> = chunk
                        .iter()
                        .filter(|r| matches!(r.image, Some(None)))
                        .map(|_| ByteArray::from("elsewhere.jpg"))
                        .collect();
                    col.typed::<ByteArrayType>().write_batch(&vals, Some(&defs[..]), None).unwrap();
                }
                2 => {
                    let defs: Vec<i16> = chunk.iter().map(|r| r.label.is_some() as i16).collect();
                    let vals: Vec<i64> = chunk.iter().filter_map(|r| r.label).collect();
                    col.typed::<Int64Type>().write_batch(&vals, Some(&defs[..]), None).unwrap();
                }
                3 => {
                    let defs: Vec<i16> = chunk.iter().map(|r| r.text.is_some() as i16).collect();
                    let vals: Vec<ByteArray> =
                        chunk.iter().filter_map(|r| r.text.as_deref()).map(ByteArray::from).collect();
                    col.typed::<ByteArrayType>().write_batch(&vals, Some(&defs[..]), None).unwrap();
                }
                4 => {
                    let defs: Vec<i16> = chunk.iter().map(|r| r.score.is_some() as i16).collect();
                    let vals: Vec<f64> = chunk.iter().filter_map(|r| r.score).collect();
                    col.typed::<DoubleType>().write_batch(&vals, Some(&defs[..]), None).unwrap();
                }
                _ => {
                    let (mut defs, mut reps, mut vals) = (Vec::new(), Vec::new(), Vec::new());
                    for r in chunk {
                        match &r.tags {
                            None => {
                                defs.push(0);
                                reps.push(0);
                            }
                            Some(t) if t.is_empty() => {
                                defs.push(1);
                                reps.push(0);
                            }
                            Some(t) => {
                                for (j, e) in t.iter().enumerate() {
                                    reps.push(i16::from(j > 0));
                                    defs.push(if e.is_some() { 3 } else { 2 });
                                    vals.extend(e.as_deref().map(ByteArray::from));
                                }
                            }
                        }
                    }
                    col.typed::<ByteArrayType>().write_batch(&vals, Some(&defs[..]), Some(&reps[..])).unwrap();
                }
            }
            col.close().unwrap();
            k += 1;
        }
        rg.close().unwrap();
    }
    w.close().unwrap();
    buf
}

fn save(name: &str, bytes: &[u8]) -> PathBuf {
    let p = crate::test_data::fresh_dir(&format!("parquet-{name}")).join("train-00000.parquet");
    std::fs::write(&p, bytes).unwrap();
    p
}

fn open_paths(paths: &[&Path], columns: &Columns) -> Result<(Catalogue, Box<dyn RecordFormat>)> {
    let locs: Vec<Location> = paths.iter().map(|p| Location::local(*p)).collect();
    open(&locs, &StorageOptions::default(), columns)
}

fn dataset(paths: &[&Path], columns: &Columns) -> Dataset {
    let (c, f) = open_paths(paths, columns).unwrap();
    record_dataset(f, c, PartialOptions::default()).unwrap()
}

type Read = std::result::Result<(Vec<u8>, i64, Vec<Value>), ImageError>;

/// What a read must give: the sample, or the kind of its error.
type Want = std::result::Result<(Vec<u8>, i64, Vec<Value>), ImageErrorKind>;

fn read_all(ds: &Dataset) -> Vec<Read> {
    let store = ds.store_as::<RecordFiles>().unwrap();
    let extras = store.extras();
    (0..ds.len())
        .map(|i| {
            let mut buf = Vec::new();
            let ctx = ReadCtx { epoch: 0, max_bytes: u64::MAX, planned: false, stopping: &|| false };
            let bytes = ds.read(i, &ctx, &mut buf)?.bytes(&buf).to_vec();
            let values = match &extras {
                Some(e) => e.read(i)?.values,
                None => Vec::new(),
            };
            Ok((bytes, ds.label(i), values))
        })
        .collect()
}

fn text(s: &Option<String>) -> Value {
    s.clone().map_or(Value::Null, Value::Text)
}

/// What the store must give for `rows` with the default columns.
fn expected(rows: &[Row]) -> Vec<Want> {
    rows.iter()
        .map(|r| match &r.image {
            None => Err(ImageErrorKind::Corrupt),
            Some(None) => Err(ImageErrorKind::Unsupported),
            Some(Some(b)) => Ok((
                b.clone(),
                r.label.unwrap_or(-1),
                vec![
                    text(&r.text),
                    r.score.map_or(Value::Null, Value::Float),
                    r.tags.as_ref().map_or(Value::Null, |t| Value::List(t.iter().map(text).collect())),
                ],
            )),
        })
        .collect()
}

fn check_reads(got: &[Read], want: &[Want]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        match (g, w) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "row {i}"),
            (Err(e), Err(k)) => assert_eq!(&e.kind, k, "row {i}: {e:?}"),
            _ => panic!("row {i}: got {g:?}, want {w:?}"),
        }
    }
}

fn codecs() -> [Compression; 4] {
    [
        Compression::SNAPPY,
        Compression::UNCOMPRESSED,
        Compression::LZ4_RAW,
        Compression::ZSTD(ZstdLevel::try_new(1).unwrap()),
    ]
}

fn lv(v: &[i16]) -> Option<&[i16]> {
    Some(v)
}

fn zstd() -> Compression {
    Compression::ZSTD(ZstdLevel::try_new(3).unwrap())
}

#[test]
fn hugging_face_layout_round_trips() {
    let rows = sample_rows(23);
    for (n, (&compression, dictionary)) in
        codecs().iter().chain([zstd()].iter()).zip([true, false, true, false, true]).enumerate()
    {
        let o = Opts { compression, dictionary, group_rows: 7 };
        let p = save(&format!("hf-{n}"), &write_hf(&rows, o));
        let (c, f) = open_paths(&[&p], &Columns::default()).unwrap();
        assert_eq!(c.fields, ["text", "score", "tags"]);
        assert_eq!(c.classes, [OsString::from("cat"), OsString::from("dog"), OsString::from("b\u{ef}rd")]);
        assert_eq!(c.units.len(), 4, "{o:?}");
        assert_eq!(
            c.units.iter().map(|u| (u.samples, u.first, u.tag)).collect::<Vec<_>>(),
            [(7, 0, 0), (7, 7, 1), (7, 14, 2), (2, 21, 3)]
        );
        let ds = record_dataset(f, c, PartialOptions::default()).unwrap();
        assert_eq!(ds.len(), 23);
        assert_eq!(ds.classes.len(), 3);
        let got = read_all(&ds);
        check_reads(&got, &expected(&rows));
        let msg = got[5].as_ref().unwrap_err().message.clone();
        assert!(msg.contains("given by path") && msg.contains("row 5"), "{msg}");
        assert!(got[9].as_ref().unwrap_err().message.contains("the image is null"));
        let name = ds.sample_name(16).display().to_string();
        assert!(name.ends_with("train-00000.parquet#16"), "{name}");
    }
}

#[test]
fn columns_are_chosen_as_asked() {
    let rows = sample_rows(10);
    let p =
        save("columns", &write_hf(&rows, Opts { compression: Compression::SNAPPY, dictionary: true, group_rows: 4 }));
    // Only the text, no labels.
    let cols = Columns { extras: Some(vec!["text".into()]), label: LabelColumn::Absent, ..Columns::default() };
    let ds = dataset(&[&p], &cols);
    assert!(ds.classes.is_empty());
    for (i, r) in read_all(&ds).into_iter().enumerate() {
        if let Ok((b, label, extras)) = r {
            assert_eq!(b, image_bytes(i));
            assert_eq!(label, -1);
            assert_eq!(extras, [text(&rows[i].text)]);
        }
    }
    // A leaf path as an extra, the label named.
    let cols = Columns {
        extras: Some(vec!["image.path".into(), "label".into()]),
        label: LabelColumn::Named("label".into()),
        ..Columns::default()
    };
    let got = read_all(&dataset(&[&p], &cols));
    assert_eq!(got[0].as_ref().unwrap().2, [Value::Null, Value::Int(0)]);
    assert_eq!(got[4].as_ref().unwrap().1, -1, "a null label is -1");
    let config = |cols: &Columns| match open_paths(&[&p], cols) {
        Err(TrdataError::Config { parameter, message }) => (parameter, message),
        other => panic!("expected a ConfigError, got {other:?}"),
    };
    let (param, msg) = config(&Columns { label: LabelColumn::Named("class".into()), ..Columns::default() });
    assert_eq!(param, LABEL_COLUMN);
    assert!(msg.contains("train-00000.parquet") && msg.contains("image.bytes, image.path, label"), "{msg}");
    let (param, msg) = config(&Columns { image: Some("picture".into()), ..Columns::default() });
    assert_eq!(param, IMAGE_COLUMN);
    assert!(msg.contains("picture"), "{msg}");
    let (param, msg) = config(&Columns {
        image: Some("text".into()),
        label: LabelColumn::Named("score".into()),
        ..Columns::default()
    });
    assert_eq!(param, LABEL_COLUMN, "{msg}");
    assert!(msg.contains("DOUBLE"), "{msg}");
    let (param, msg) = config(&Columns { extras: Some(vec!["image".into()]), ..Columns::default() });
    assert_eq!(param, EXTRAS);
    assert!(msg.contains("struct"), "{msg}");
    let (param, _) = config(&Columns { image: Some("label".into()), ..Columns::default() });
    assert_eq!(param, IMAGE_COLUMN);
}

/// A plain binary image column, an int32 label, other types and a two-level legacy list.
#[test]
fn plain_columns_and_every_value_type() {
    let schema = "message m { required binary img; optional int32 y; required boolean ok; optional float f;
        optional int32 u (INTEGER(32,false)); repeated int64 ids; optional fixed_len_byte_array(2) fx; optional int96 old; }";
    let schema = Arc::new(parse_message_type(schema).unwrap());
    let mut buf = Vec::new();
    let o = Opts { compression: zstd(), dictionary: false, group_rows: 0 };
    let mut w = SerializedFileWriter::new(&mut buf, schema, props(o, None)).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut k = 0;
    while let Some(mut col) = rg.next_column().unwrap() {
        match k {
            0 => {
                let v: Vec<ByteArray> = (0..3).map(|i| ByteArray::from(image_bytes(i))).collect();
                col.typed::<ByteArrayType>().write_batch(&v, None, None).unwrap();
            }
            1 => _ = col.typed::<Int32Type>().write_batch(&[7, 9], lv(&[1, 0, 1]), None).unwrap(),
            2 => _ = col.typed::<BoolType>().write_batch(&[true, false, true], None, None).unwrap(),
            3 => _ = col.typed::<parquet::data_type::FloatType>().write_batch(&[1.5], lv(&[0, 1, 0]), None).unwrap(),
            4 => _ = col.typed::<Int32Type>().write_batch(&[-1, 5, 6], lv(&[1, 1, 1]), None).unwrap(),
            5 => _ = col.typed::<Int64Type>().write_batch(&[1, 2, 3], lv(&[1, 1, 0, 1]), lv(&[0, 1, 0, 0])).unwrap(),
            6 => {
                let v: Vec<FixedLenByteArray> =
                    [b"ab", b"cd", b"ef"].iter().map(|b| ByteArray::from(b.to_vec()).into()).collect();
                col.typed::<parquet::data_type::FixedLenByteArrayType>().write_batch(&v, lv(&[1, 1, 1]), None).unwrap();
            }
            _ => {
                let v = vec![parquet::data_type::Int96::new(); 3];
                col.typed::<parquet::data_type::Int96Type>().write_batch(&v, lv(&[1, 1, 1]), None).unwrap();
            }
        }
        col.close().unwrap();
        k += 1;
    }
    rg.close().unwrap();
    w.close().unwrap();
    let p = save("plain", &buf);
    let cols = Columns { image: Some("img".into()), label: LabelColumn::Named("y".into()), extras: None };
    let (c, f) = open_paths(&[&p], &cols).unwrap();
    assert_eq!(c.fields, ["ok", "f", "u", "ids", "fx"], "int96 skipped by default");
    let got = read_all(&record_dataset(f, c, PartialOptions::default()).unwrap());
    let got: Vec<_> = got.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(
        got.iter().map(|g| (g.0.clone(), g.1)).collect::<Vec<_>>(),
        [(image_bytes(0), 7), (image_bytes(1), -1), (image_bytes(2), 9)]
    );
    use Value::*;
    assert_eq!(got[0].2, [Bool(true), Null, Int(u32::MAX.into()), List(vec![Int(1), Int(2)]), Bytes(b"ab".to_vec())]);
    assert_eq!(got[1].2, [Bool(false), Float(1.5), Int(5), List(vec![]), Bytes(b"cd".to_vec())]);
    assert_eq!(got[2].2, [Bool(true), Null, Int(6), List(vec![Int(3)]), Bytes(b"ef".to_vec())]);
    match open_paths(&[&p], &Columns { extras: Some(vec!["old".into()]), ..cols }) {
        Err(TrdataError::Config { parameter, message }) => {
            assert_eq!(parameter, EXTRAS);
            assert!(message.contains("INT96"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn several_files_must_agree() {
    let rows = sample_rows(12);
    let o = Opts { compression: Compression::SNAPPY, dictionary: true, group_rows: 5 };
    let a = save("multi-a", &write_hf(&rows[..8], o));
    let b = save("multi-b", &write_hf(&rows[8..], o));
    let (c, f) = open_paths(&[&a, &b], &Columns::default()).unwrap();
    assert_eq!(
        c.units.iter().map(|u| (u.file, u.samples, u.first)).collect::<Vec<_>>(),
        [(0, 5, 0), (0, 3, 5), (1, 4, 0)]
    );
    let ds = record_dataset(f, c, PartialOptions::default()).unwrap();
    check_reads(&read_all(&ds), &expected(&rows));
    assert!(ds.sample_name(9).display().to_string().contains("multi-b"));
    assert!(ds.sample_name(9).display().to_string().ends_with("#1"));
    // A file whose label is a string.
    let schema = Arc::new(
        parse_message_type(
            "message m { optional group image { optional binary bytes; } optional binary label (STRING); }",
        )
        .unwrap(),
    );
    let mut buf = Vec::new();
    let mut w = SerializedFileWriter::new(&mut buf, schema, props(o, None)).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut k = 0;
    while let Some(mut col) = rg.next_column().unwrap() {
        let (v, d) = if k == 0 { ("x", 2) } else { ("lbl", 1) };
        col.typed::<ByteArrayType>().write_batch(&[ByteArray::from(v)], lv(&[d]), None).unwrap();
        col.close().unwrap();
        k += 1;
    }
    rg.close().unwrap();
    w.close().unwrap();
    let odd = save("multi-odd", &buf);
    match open_paths(&[&a, &odd], &Columns::default()) {
        Err(TrdataError::Config { parameter, message }) => {
            assert_eq!(parameter, LABEL_COLUMN);
            assert!(message.contains("multi-odd") && message.contains("BYTE_ARRAY"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

fn source_error(paths: &[&Path]) -> String {
    match open_paths(paths, &Columns::default()) {
        Err(TrdataError::Source { path, message }) => {
            assert_eq!(path, paths[paths.len() - 1], "the error names the file");
            message
        }
        other => panic!("expected a SourceError, got {other:?}"),
    }
}

#[test]
fn codecs_we_do_not_read_are_refused_by_name() {
    let rows = sample_rows(4);
    for (c, name) in [
        (Compression::GZIP(GzipLevel::default()), "GZIP"),
        (Compression::BROTLI(BrotliLevel::default()), "BROTLI"),
        (Compression::LZ4, "LZ4"),
    ] {
        // The writer has no such codec compiled in: write snappy and relabel the codec in the footer.
        let file = write_hf(&rows, Opts { compression: Compression::SNAPPY, dictionary: false, group_rows: 4 });
        let file = edit_footer(&file, |_, _, b| b.set_compression(c));
        let p = save(&format!("codec-{name}"), &file);
        let msg = source_error(&[&p]);
        assert!(msg.contains(name) && msg.contains("image.bytes") && msg.contains("rewrite"), "{msg}");
        assert!(msg.contains("row group 0"), "{msg}");
    }
}

/// `file` with its footer rewritten: `edit(row group, column, chunk)` on every chunk.
fn edit_footer(
    file: &[u8],
    edit: impl Fn(
        usize,
        usize,
        parquet::file::metadata::ColumnChunkMetaDataBuilder,
    ) -> parquet::file::metadata::ColumnChunkMetaDataBuilder,
) -> Vec<u8> {
    let md = decode_footer_bytes(file).unwrap();
    let len = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap()) as usize;
    let mut b = md.into_builder();
    let rgs: Vec<RowGroupMetaData> = b
        .take_row_groups()
        .into_iter()
        .enumerate()
        .map(|(g, rg)| {
            let cols = rg
                .columns()
                .iter()
                .enumerate()
                .map(|(k, c)| edit(g, k, c.clone().into_builder()).build().unwrap())
                .collect();
            let mut rb = rg.into_builder();
            let _ = rb.take_columns();
            rb.set_column_metadata(cols).build().unwrap()
        })
        .collect();
    let md = b.set_row_groups(rgs).build();
    let mut out = file[..file.len() - 8 - len].to_vec();
    ParquetMetaDataWriter::new(&mut out, &md).finish().unwrap();
    assert_eq!(&out[out.len() - 4..], b"PAR1");
    out
}

#[test]
fn damaged_files_fail_at_open_naming_the_file() {
    let rows = sample_rows(9);
    let file = write_hf(&rows, Opts { compression: Compression::SNAPPY, dictionary: true, group_rows: 4 });
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", file[..file.len() - 3].to_vec(), "PAR1"),
        ("tiny", b"PAR1PAR1".to_vec(), "too short"),
        ("bad-magic", [b"PAR2", &file[4..]].concat(), "PAR1"),
        ("encrypted", [&file[..file.len() - 4], b"PARE"].concat(), "encrypted"),
    ];
    let mut long = file.clone();
    let n = long.len();
    long[n - 8..n - 4].copy_from_slice(&(n as u32).to_le_bytes());
    cases.push(("footer-past-file", long, "footer length"));
    let mut short = file.clone();
    short[n - 8..n - 4].copy_from_slice(&5u32.to_le_bytes());
    cases.push(("footer-garbage", short, "footer cannot be read"));
    cases.push((
        "chunk-past-eof",
        edit_footer(&file, |g, k, b| {
            if (g, k) == (1, 0) { b.set_data_page_offset(n as i64 + 10).set_dictionary_page_offset(None) } else { b }
        }),
        "row group 1, column image.bytes",
    ));
    cases.push((
        "negative-offset",
        edit_footer(&file, |_, k, b| if k == 2 { b.set_dictionary_page_offset(Some(-4)) } else { b }),
        "impossible offsets",
    ));
    cases.push((
        "negative-size",
        edit_footer(&file, |_, k, b| if k == 3 { b.set_total_compressed_size(-1) } else { b }),
        "impossible offsets",
    ));
    cases.push(("external", edit_footer(&file, |_, _, b| b.set_file_path("other.parquet".into())), "another file"));
    for (name, bytes, want) in cases {
        let p = save(name, &bytes);
        let msg = source_error(&[&p]);
        assert!(msg.contains(want), "{name}: {msg}");
    }
}

/// Thrift compact bytes for tests: a field `(id delta 1.., type)` header and values.
fn zigzag(v: i64, out: &mut Vec<u8>) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (u & 0x7f) as u8;
        u >>= 7;
        if u == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A footer whose schema is a chain of `depth` one-child groups.
fn deep_footer(depth: usize) -> Vec<u8> {
    let mut m = Vec::new();
    m.push(0x15); // field 1 i32 version
    zigzag(1, &mut m);
    m.push(0x19); // field 2 list
    m.push(0xfc); // list of structs, size follows
    let size = depth as u64 + 1;
    let mut u = size;
    loop {
        let b = (u & 0x7f) as u8;
        u >>= 7;
        if u == 0 {
            m.push(b);
            break;
        }
        m.push(b | 0x80);
    }
    for k in 0..=depth {
        if k == depth {
            m.extend([0x15, 0x0c]); // type = BYTE_ARRAY (6)
            m.extend([0x38, 1, b'x']); // field 4 name
        } else {
            m.extend([0x48, 1, b'g']); // field 4 name
            m.push(0x15); // field 5 num_children
            zigzag(1, &mut m);
        }
        m.push(0);
    }
    m.push(0x16); // field 3 num_rows i64
    zigzag(0, &mut m);
    m.push(0x19); // field 4 row groups
    m.push(0x0c);
    m.push(0); // end of FileMetaData
    let mut file = b"PAR1".to_vec();
    file.extend(&m);
    file.extend((m.len() as u32).to_le_bytes());
    file.extend(b"PAR1");
    file
}

#[test]
fn a_schema_nested_100000_deep_is_refused_not_a_stack_overflow() {
    let p = save("deep", &deep_footer(99_000));
    let msg = source_error(&[&p]);
    assert!(msg.contains("nested deeper than 64"), "{msg}");
    let p = save("deeper", &deep_footer(100_000));
    let msg = source_error(&[&p]);
    assert!(msg.contains("footer cannot be read"), "{msg}");
    // A shallow chain of the same making is read as far as the crate goes (no image column in it).
    let p = save("shallow", &deep_footer(3));
    match open_paths(&[&p], &Columns::default()) {
        Err(TrdataError::Config { parameter, .. }) => assert_eq!(parameter, IMAGE_COLUMN),
        Err(TrdataError::Source { message, .. }) => assert!(!message.contains("nested deeper"), "{message}"),
        other => panic!("{other:?}"),
    }
}

fn page_header_bytes(page_type: i32, uncompressed: i32, compressed: i32, num_values: i32) -> Vec<u8> {
    let mut h = Vec::new();
    for v in [page_type, uncompressed, compressed] {
        h.push(0x15);
        zigzag(v.into(), &mut h);
    }
    h.push(0x2c); // field 5 struct
    h.push(0x15);
    zigzag(num_values.into(), &mut h);
    h.push(0);
    h.push(0);
    h
}

#[test]
fn page_headers_are_walked_before_the_crate_reads_them() {
    use thrift::*;
    let h = page_header_bytes(DATA_PAGE, 10, 4, 3);
    assert_eq!(
        page_header(&h).unwrap(),
        PageHead { header_len: h.len() as u64, page_type: 0, uncompressed: 10, compressed: 4, num_values: 3 }
    );
    // A chunk made of one page of each bad kind, checked against a real column's metadata.
    let schema =
        Arc::new(SchemaDescriptor::new(Arc::new(parse_message_type("message m { optional binary b; }").unwrap())));
    let check = |header: Vec<u8>, declared: i64| {
        let mut chunk = header;
        chunk.extend([0u8; 4]);
        let cc = ColumnChunkMetaData::builder(schema.column(0))
            .set_data_page_offset(100)
            .set_total_compressed_size(chunk.len() as i64)
            .set_total_uncompressed_size(declared)
            .build()
            .unwrap();
        let span = Span { bytes: Bytes::from(chunk), offset: 100 };
        Parquet::check_pages(&span, &cc, 3)
    };
    assert!(check(page_header_bytes(DATA_PAGE, 4, 4, 3), 100).is_ok());
    let huge = check(page_header_bytes(DATA_PAGE, i32::MAX, 4, 3), i64::MAX).unwrap_err();
    assert_eq!(huge.kind, ImageErrorKind::TooLarge, "{huge:?}");
    let over = check(page_header_bytes(DATA_PAGE, 1000, 4, 3), 100).unwrap_err();
    assert!(over.message.contains("declares uncompressed"), "{over:?}");
    let neg = check(page_header_bytes(DATA_PAGE, -1, 4, 3), 100).unwrap_err();
    assert_eq!(neg.kind, ImageErrorKind::Corrupt);
    let past = check(page_header_bytes(DATA_PAGE, 4, 5, 3), 100).unwrap_err();
    assert!(past.message.contains("runs past"), "{past:?}");
    let unknown = check(page_header_bytes(9, 4, 4, 3), 100).unwrap_err();
    assert!(unknown.message.contains("unknown type"), "{unknown:?}");
    let values = check(page_header_bytes(DATA_PAGE, 4, 4, i32::MAX), 100).unwrap_err();
    assert_eq!(values.kind, ImageErrorKind::TooLarge, "{values:?}");
    assert!(page_header(&[0x15]).is_err());
    // Nesting past the cap is refused, not recursed into.
    let mut deep = vec![0x15, 0, 0x3c];
    deep.extend([0x1c; 100]);
    assert!(page_header(&deep).unwrap_err().contains("nested deeper"));
}

/// A file whose chunk bytes were damaged after open fails that unit with a typed error naming file and row group,
/// and the other units still read.
#[test]
fn damage_inside_a_row_group_fails_that_unit_only() {
    let rows = sample_rows(12);
    let file = write_hf(&rows, Opts { compression: Compression::SNAPPY, dictionary: true, group_rows: 6 });
    let p = save("damaged-unit", &file);
    let (c, f) = open_paths(&[&p], &Columns::default()).unwrap();
    let unit = c.units[1].clone();
    let ds = record_dataset(f, c, PartialOptions::default()).unwrap();
    // Overwrite the second row group's span with garbage (the footer, read at open, stays).
    let mut damaged = file.clone();
    for b in &mut damaged[unit.offset as usize..(unit.offset + unit.len) as usize] {
        *b = 0xff;
    }
    std::fs::write(&p, &damaged).unwrap();
    let got = read_all(&ds);
    check_reads(&got[..6], &expected(&rows)[..6]);
    for r in &got[6..] {
        let e = r.as_ref().unwrap_err();
        assert!(matches!(e.kind, ImageErrorKind::Corrupt | ImageErrorKind::TooLarge), "{e:?}");
        assert!(e.message.contains("row group 1") && e.message.contains("train-00000.parquet"), "{e:?}");
        assert!(!e.message.contains("its decoder panicked"), "{e:?}");
    }
}

#[test]
fn class_names_from_hugging_face_metadata() {
    let names = class_names(HF_JSON.as_bytes(), "label").unwrap().unwrap();
    assert_eq!(names, ["cat", "dog", "b\u{ef}rd"]);
    assert_eq!(class_names(HF_JSON.as_bytes(), "text").unwrap(), None, "a Value is no ClassLabel");
    assert_eq!(class_names(br#"{"info": 3}"#, "label").unwrap(), None);
    assert!(
        class_names(br#"{"info": {"features": {"label": {"_type": "ClassLabel", "names": [1]}}}}"#, "label").is_err()
    );
    assert!(class_names(br#"{"info": {"features": {"label": {"#, "label").is_err());
    let deep = format!(
        "{{\"info\": {{\"features\": {{\"x\": {}{}, \"label\": 1}}}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(class_names(deep.as_bytes(), "label").is_err());
}

/// Labels outside the class names make their samples bad.
#[test]
fn labels_outside_the_classes_are_bad_samples() {
    let mut rows = sample_rows(6);
    rows[2].label = Some(3);
    rows[3].label = Some(-2);
    let p = save(
        "label-range",
        &write_hf(&rows, Opts { compression: Compression::SNAPPY, dictionary: false, group_rows: 6 }),
    );
    let got = read_all(&dataset(&[&p], &Columns::default()));
    for i in [2, 3] {
        let e = got[i].as_ref().unwrap_err();
        assert!(e.message.contains("outside the 3 class names"), "{e:?}");
    }
    assert!(got[0].is_ok() && got[4].as_ref().unwrap().1 == -1);
}

/// Uncompressed image pages decode at about memcpy speed (printed; asserted loosely).
#[test]
fn decoding_uncompressed_images_is_fast() {
    let rows: Vec<Row> = (0..64)
        .map(|i| Row {
            image: Some(Some(vec![i as u8; 256 << 10])),
            label: Some(1),
            text: None,
            score: None,
            tags: None,
        })
        .collect();
    let o = Opts { compression: Compression::UNCOMPRESSED, dictionary: false, group_rows: 64 };
    let schema = "message m { optional group image { optional binary bytes; optional binary path (STRING); } optional int64 label; }";
    let schema = Arc::new(parse_message_type(schema).unwrap());
    let mut buf = Vec::new();
    let props =
        Arc::new(WriterProperties::builder().set_compression(o.compression).set_dictionary_enabled(false).build());
    let mut w = SerializedFileWriter::new(&mut buf, schema, props).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut k = 0;
    while let Some(mut col) = rg.next_column().unwrap() {
        match k {
            0 => {
                let v: Vec<ByteArray> =
                    rows.iter().map(|r| ByteArray::from(r.image.clone().flatten().unwrap())).collect();
                col.typed::<ByteArrayType>().write_batch(&v, lv(&[2; 64]), None).unwrap();
            }
            1 => _ = col.typed::<ByteArrayType>().write_batch(&[], lv(&[1; 64]), None).unwrap(),
            _ => _ = col.typed::<Int64Type>().write_batch(&[1; 64], lv(&[1; 64]), None).unwrap(),
        }
        col.close().unwrap();
        k += 1;
    }
    rg.close().unwrap();
    w.close().unwrap();
    let p = save("speed", &buf);
    let (c, f) = open_paths(&[&p], &Columns::default()).unwrap();
    let unit = c.units[0].clone();
    let bytes = std::fs::read(&p).unwrap()[unit.offset as usize..(unit.offset + unit.len) as usize].to_vec();
    let ds = record_dataset(f, c, PartialOptions::default()).unwrap();
    // The first read reads and decodes the one unit; the baseline is the copies any reader makes of these bytes
    // (the read into a buffer, the decoded block), measured here under the same load.
    let t = std::time::Instant::now();
    let mut buf = Vec::new();
    let ctx = ReadCtx { epoch: 0, max_bytes: u64::MAX, planned: false, stopping: &|| false };
    assert_eq!(ds.read(0, &ctx, &mut buf).unwrap().bytes(&buf).len(), 256 << 10);
    let dt = t.elapsed();
    let t = std::time::Instant::now();
    let copies: Vec<Vec<u8>> = (0..2).map(|_| std::hint::black_box(bytes.clone())).collect();
    let base = t.elapsed();
    drop(copies);
    let got = read_all(&ds);
    assert!(got.iter().all(|r| r.as_ref().is_ok_and(|r| r.0.len() == 256 << 10)));
    let mb = bytes.len() as f64 / 1e6;
    eprintln!(
        "read and decoded {mb:.1} MB of uncompressed image pages in {dt:?} ({:.0} MB/s); two plain copies took {base:?}",
        mb / dt.as_secs_f64()
    );
    assert!(dt.as_secs_f64() < 2.0, "{dt:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Flipped bytes anywhere and truncation: open and every read give typed errors, never a panic.
    #[test]
    fn mutated_files_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        codec in 0usize..4,
        in_footer in any::<bool>(),
    ) {
        thread_local! {
            static FILES: Vec<Vec<u8>> = codecs().iter().enumerate().map(|(n, &c)| {
                write_hf(&sample_rows(9), Opts { compression: c, dictionary: n % 2 == 0, group_rows: 4 })
            }).collect();
        }
        let mut file = FILES.with(|f| f[codec].clone());
        let n = file.len();
        let footer = u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize + 8;
        for (at, v) in &flips {
            let k = if in_footer { n - footer + at.index(footer) } else { at.index(n) };
            file[k] ^= v | 1;
        }
        if truncate {
            file.truncate(cut.index(n));
        }
        let p = crate::test_data::fresh_dir("parquet-prop").join(format!("m-{:?}.parquet", std::thread::current().id()));
        std::fs::write(&p, &file).unwrap();
        match open_paths(&[&p], &Columns::default()) {
            // The crate's own panics (its footer or page decoders on corrupt bytes) are caught by our guards and
            // named; "its decoder panicked" is the store's last-resort catch: a panic in our code.
            Err(TrdataError::Source { message, .. }) => prop_assert!(!message.contains("its decoder panicked"), "{}", message),
            Err(TrdataError::Config { .. }) => {}
            Err(e) => prop_assert!(false, "{e:?}"),
            Ok((c, f)) => {
                if let Ok(ds) = record_dataset(f, c, PartialOptions::default()) {
                    for r in read_all(&ds) {
                        if let Err(e) = r {
                            prop_assert!(!e.message.contains("its decoder panicked"), "{:?}", e);
                        }
                    }
                }
            }
        }
    }

    /// The fuzz target's properties (fuzz/fuzz_targets/parquet_footer.rs) on random bytes.
    #[test]
    fn random_footers_page_headers_and_json_never_panic(rest in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut file = b"PAR1".to_vec();
        file.extend_from_slice(&rest);
        file.extend_from_slice(&(rest.len() as u32).to_le_bytes());
        file.extend_from_slice(b"PAR1");
        if let Ok(md) = decode_footer_bytes(&file) {
            prop_assert!(md.num_row_groups() as u64 <= MAX_ROW_GROUPS);
        }
        let _ = decode_footer_bytes(&rest);
        let mut at = 0usize;
        while at < rest.len() {
            let Ok(h) = thrift::page_header(&rest[at..]) else { break };
            prop_assert!(h.header_len as usize <= rest.len() - at && h.header_len > 0);
            let Ok(body) = usize::try_from(h.compressed) else { break };
            at = at.saturating_add(h.header_len as usize).saturating_add(body);
        }
        if let Ok(Some(names)) = class_names(&rest, "label") {
            prop_assert!(names.iter().map(|n| n.len()).sum::<usize>() <= rest.len());
        }
    }
}

/// A file written by Hugging Face `datasets` 5.2 with pyarrow 26 (tests/fixtures/parquet/make_hf_parquet.py: its
/// images uncompressed and plain, the rest snappy with dictionaries, three row groups, a page index), read whole.
#[test]
fn a_file_written_by_hugging_face_datasets() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet/hf_datasets.parquet");
    let (c, f) = open_paths(&[&p], &Columns::default()).unwrap();
    assert_eq!(c.fields, ["text", "score", "tags"]);
    assert_eq!(c.classes, [OsString::from("cat"), OsString::from("dog"), OsString::from("b\u{ef}rd")]);
    assert_eq!(c.units.iter().map(|u| (u.samples, u.first)).collect::<Vec<_>>(), [(4, 0), (4, 4), (3, 8)]);
    let ds = record_dataset(f, c, PartialOptions::default()).unwrap();
    let got = read_all(&ds);
    assert_eq!(got.len(), 11);
    for (i, r) in got.into_iter().enumerate() {
        let (bytes, label, extras) = r.unwrap();
        let mut want = b"\x89PNG".to_vec();
        want.extend((0..200 + 13 * i).map(|k| ((i * 7 + k) % 256) as u8));
        assert_eq!(bytes, want, "row {i}");
        assert_eq!(label, if i == 4 { -1 } else { (i % 3) as i64 }, "row {i}");
        let text = if i % 5 == 3 { Value::Null } else { Value::Text(format!("caption {i}")) };
        let tags = Value::List((0..i % 3).map(|j| Value::Text(format!("t{j}"))).collect());
        assert_eq!(extras, [text, Value::Float(i as f64 * 0.25), tags], "row {i}");
    }
    assert!(ds.sample_name(9).display().to_string().ends_with("hf_datasets.parquet#9"));
}
