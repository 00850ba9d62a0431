//! A whole spec as the binding hands it over — `("kind", {name: value, …})`, an [`Arg`] — into the core's
//! [`TransformSpec`]: the classic transforms (which fold into the decode), the resize filter wrapper
//! (`resampled`), the containers (whose `transforms` are specs themselves) and every op of [`OpSpec`]. The one
//! parse of a spec: every kind reads its parameters by name through [`Args`], which refuses a missing or an
//! unknown one (docs/design/architecture.md: Python translates types, the core parses and checks values).

use super::{Arg, Args, OpSpec, P, RandomApply, RandomChoice, RandomOrder, SCALE, SIZE, Site, TRANSFORMS};
use crate::augment::geometry::{self, RESIZE_INTERPOLATION, Resample};
use crate::augment::{TransformSpec, program};
use crate::error::{Result, TrdataError};

impl TransformSpec {
    /// Parse one spec (`("kind", {name: value, …})`, as Python's `Transform._spec()` returns it). Type errors
    /// name the parameter; a missing parameter names itself and the kind; a parameter the kind does not take
    /// is refused, named. Values are checked when the pipeline is compiled (augment/geometry.rs, `OpSpec::check`).
    pub fn parse(spec: &Arg) -> Result<TransformSpec> {
        let (kind, params) = match spec {
            Arg::List(v) => match v.as_slice() {
                [Arg::Str(kind), Arg::Map(params)] => (kind.as_str(), params.as_slice()),
                _ => return Err(malformed(spec)),
            },
            _ => return Err(malformed(spec)),
        };
        if OpSpec::is_kind(kind) {
            return OpSpec::from_args(kind, params).map(TransformSpec::Op);
        }
        let a = Args::new(kind, params)?;
        let out = match kind {
            "random_resized_crop" => {
                let (height, width) = side_pair(&a)?;
                TransformSpec::RandomResizedCrop { height, width, scale: a.pair(SCALE)?, ratio: a.pair(super::RATIO)? }
            }
            "resize_shorter" => TransformSpec::ResizeShorter { shorter: side(a.get(SIZE)?)? },
            "resize" => {
                let (height, width) = side_pair(&a)?;
                TransformSpec::ResizeExact { height, width }
            }
            "resize_keep_ratio" => {
                let (height, width) = side_pair(&a)?;
                TransformSpec::ResizeKeepRatio { height, width, longest: a.num("longest")? }
            }
            "center_crop" => {
                let (height, width) = side_pair(&a)?;
                TransformSpec::CenterCrop { height, width }
            }
            "horizontal_flip" => TransformSpec::RandomHorizontalFlip { p: a.num(P)? },
            "resampled" => {
                let filter = a.choice(&RESIZE_INTERPOLATION)?;
                let antialias = a.boolean("antialias")?;
                let inner = TransformSpec::parse(a.get("transform")?)?;
                TransformSpec::Resampled { resample: Resample { filter, antialias }, inner: Box::new(inner) }
            }
            "random_apply" => {
                let transforms = inner_ops(&a)?;
                TransformSpec::Op(OpSpec::RandomApply(RandomApply { transforms, p: a.num(P)? }))
            }
            "random_choice" => {
                let transforms = inner_ops(&a)?;
                let p = if a.is_none(P)? { vec![1.0; transforms.len()] } else { a.nums(P)? };
                TransformSpec::Op(OpSpec::RandomChoice(RandomChoice { transforms, p }))
            }
            "random_order" => TransformSpec::Op(OpSpec::RandomOrder(RandomOrder { transforms: inner_ops(&a)? })),
            _ => return Err(a.unknown()),
        };
        a.finish()?;
        Ok(out)
    }
}

fn malformed(spec: &Arg) -> TrdataError {
    TrdataError::config(TRANSFORMS, format!("{spec:?} must be a (kind, {{name: value}}) spec"))
}

/// A classic transform's side: an int the core's `size` range can hold as u32 (the range itself is checked
/// when the pipeline is compiled, where the message names the transform).
fn side(a: &Arg) -> Result<u32> {
    match a {
        Arg::Int(v) => u32::try_from(*v).map_err(|_| geometry::SIZE.error(&v.to_string())),
        Arg::BigInt(shown) => Err(geometry::SIZE.error(shown)),
        other => Err(TrdataError::config(SIZE, format!("{other:?} must be an int"))),
    }
}

/// A classic transform's `size`: (height, width).
fn side_pair(a: &Args<'_>) -> Result<(u32, u32)> {
    match a.get(SIZE)? {
        Arg::List(v) if v.len() == 2 => Ok((side(&v[0])?, side(&v[1])?)),
        other => Err(TrdataError::config(SIZE, format!("{other:?} must be a (height, width) pair of ints"))),
    }
}

/// A container's `transforms`: each a spec, parsed like a top-level one, as its stage-2 op (containers always
/// run on the uint8 image).
fn inner_ops(a: &Args<'_>) -> Result<Vec<OpSpec>> {
    let list = match a.get(TRANSFORMS)? {
        Arg::List(v) => v,
        other => return Err(TrdataError::config(TRANSFORMS, format!("{other:?} must be a list of specs"))),
    };
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            // The site here only names the op in an `interpolation` message; the compile checks again in place.
            program::stage2_op(&TransformSpec::parse(item)?, Site::top(0).child(i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::ops::{ColorJitter, GaussianBlur, HorizontalFlip, RandomInvert};

    fn spec(kind: &str, params: &[(&str, Arg)]) -> Arg {
        let params = params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        Arg::List(vec![Arg::Str(kind.to_string()), Arg::Map(params)])
    }

    /// The parameter and the message of a ConfigError.
    fn refused(spec: &Arg) -> (String, String) {
        match TransformSpec::parse(spec) {
            Err(TrdataError::Config { parameter, message }) => (parameter, message),
            other => panic!("{spec:?} must be refused with a ConfigError, got {other:?}"),
        }
    }

    fn pair(a: f64, b: f64) -> Arg {
        Arg::List(vec![Arg::Num(a), Arg::Num(b)])
    }

    #[test]
    fn parameters_are_read_by_name_in_any_order() {
        let jitter = spec(
            "color_jitter",
            &[("hue", Arg::None), ("saturation", Arg::None), ("contrast", pair(0.5, 1.5)), ("brightness", Arg::None)],
        );
        let want = ColorJitter { brightness: None, contrast: Some((0.5, 1.5)), saturation: None, hue: None };
        assert_eq!(TransformSpec::parse(&jitter).unwrap(), TransformSpec::Op(OpSpec::ColorJitter(want)));
        let blur = spec(
            "gaussian_blur",
            &[("sigma", pair(0.1, 2.0)), ("kernel_size", Arg::List(vec![Arg::Int(3), Arg::Int(5)]))],
        );
        let want = GaussianBlur { kx: 3, ky: 5, sigma: (0.1, 2.0) };
        assert_eq!(TransformSpec::parse(&blur).unwrap(), TransformSpec::Op(OpSpec::GaussianBlur(want)));
        let flip = spec("horizontal_flip", &[("p", Arg::Num(0.25))]);
        assert_eq!(TransformSpec::parse(&flip).unwrap(), TransformSpec::RandomHorizontalFlip { p: 0.25 });
        let crop = spec("center_crop", &[("size", Arg::List(vec![Arg::Int(4), Arg::Int(6)]))]);
        assert_eq!(TransformSpec::parse(&crop).unwrap(), TransformSpec::CenterCrop { height: 4, width: 6 });
    }

    #[test]
    fn a_missing_parameter_is_named_with_the_kind() {
        let (param, message) = refused(&spec("random_solarize", &[("threshold", Arg::Num(128.0))]));
        assert_eq!(param, "p");
        assert!(message.contains("random_solarize") && message.contains("missing"), "{message}");
        // A classic transform and a container, the same way.
        let (param, message) = refused(&spec("random_resized_crop", &[("size", Arg::List(vec![Arg::Int(8); 2]))]));
        assert_eq!(param, "scale");
        assert!(message.contains("random_resized_crop"), "{message}");
        let (param, message) = refused(&spec("random_apply", &[("transforms", Arg::List(vec![]))]));
        assert_eq!(param, "p");
        assert!(message.contains("random_apply"), "{message}");
    }

    #[test]
    fn an_unknown_parameter_is_named() {
        let (param, message) = refused(&spec("random_invert", &[("p", Arg::Num(0.5)), ("prob", Arg::Num(0.5))]));
        assert_eq!(param, "prob");
        assert!(message.contains("not a parameter") && message.contains("random_invert"), "{message}");
        let (param, _) = refused(&spec("random_channel_permutation", &[("p", Arg::Num(0.5))]));
        assert_eq!(param, "p");
        let (param, _) = refused(&spec("center_crop", &[("size", Arg::Int(3)), ("fill", Arg::Int(0))]));
        assert_eq!(param, "size", "a wrong type is found before the unknown key");
        let size = Arg::List(vec![Arg::Int(3); 2]);
        let (param, _) = refused(&spec("center_crop", &[("size", size), ("fill", Arg::Int(0))]));
        assert_eq!(param, "fill");
        // A key given twice (only a hand-made spec can) is refused too.
        let (param, message) = refused(&spec("random_invert", &[("p", Arg::Num(0.5)), ("p", Arg::Num(0.1))]));
        assert_eq!(param, "p");
        assert!(message.contains("twice"), "{message}");
        // Inside a container: the inner spec's own key.
        let inner = spec("random_invert", &[("q", Arg::Num(0.5))]);
        let (param, _) = refused(&spec("random_order", &[("transforms", Arg::List(vec![inner]))]));
        assert_eq!(param, "p");
        let inner = spec("random_invert", &[("p", Arg::Num(0.5)), ("q", Arg::Num(0.5))]);
        let (param, _) = refused(&spec("random_order", &[("transforms", Arg::List(vec![inner]))]));
        assert_eq!(param, "q");
    }

    #[test]
    fn a_wrong_type_names_the_parameter() {
        let (param, message) = refused(&spec("random_invert", &[("p", Arg::Str("half".into()))]));
        assert_eq!((param.as_str(), message.as_str()), ("p", "Str(\"half\") must be a number"));
        let (param, message) = refused(&spec("grayscale", &[("num_output_channels", Arg::Num(3.0))]));
        assert_eq!((param.as_str(), message.as_str()), ("num_output_channels", "Num(3.0) must be an int"));
        let (param, _) = refused(&spec(
            "gaussian_noise",
            &[("mean", Arg::Num(0.0)), ("sigma", Arg::Num(0.1)), ("clip", Arg::Int(1))],
        ));
        assert_eq!(param, "clip");
        let (param, _) = refused(&spec("horizontal_flip", &[("p", Arg::None)]));
        assert_eq!(param, "p");
        let (param, message) = refused(&spec("resize_shorter", &[("size", Arg::Int(-1))]));
        assert_eq!((param.as_str(), message.as_str()), ("size", "-1 must be in 1..=65536"));
        let (param, message) = refused(&spec("resize_shorter", &[("size", Arg::BigInt("2**200".into()))]));
        assert_eq!((param.as_str(), message.as_str()), ("size", "2**200 must be in 1..=65536"));
    }

    #[test]
    fn a_malformed_spec_or_kind_is_refused() {
        let (param, _) = refused(&Arg::List(vec![Arg::Str("random_invert".into()), Arg::Num(0.5)]));
        assert_eq!(param, "transforms");
        let (param, message) = refused(&spec("random_nonsense", &[]));
        assert_eq!(param, "transforms");
        assert!(message.contains("unknown transform"), "{message}");
    }

    #[test]
    fn containers_parse_their_inner_specs() {
        let inner =
            vec![spec("random_invert", &[("p", Arg::Num(1.0))]), spec("horizontal_flip", &[("p", Arg::Num(0.5))])];
        let apply = spec("random_choice", &[("transforms", Arg::List(inner)), ("p", Arg::None)]);
        let want = RandomChoice {
            transforms: vec![
                OpSpec::RandomInvert(RandomInvert { p: 1.0 }),
                OpSpec::HorizontalFlip(HorizontalFlip { p: 0.5 }),
            ],
            p: vec![1.0, 1.0],
        };
        assert_eq!(TransformSpec::parse(&apply).unwrap(), TransformSpec::Op(OpSpec::RandomChoice(want)));
    }
}
