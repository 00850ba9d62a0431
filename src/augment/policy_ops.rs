//! policy_ops — the one vocabulary of the auto-augment policies' sub-ops: [`PolicyOp`] names what a drawn
//! sub-op does to the image (shear, rotate, posterize, …), and both families draw from it — torchvision's
//! AutoAugment/RandAugment/TrivialAugmentWide/AugMix ([`super::policy`]) and timm's RandAugment/AutoAugment/
//! AugMix ([`super::timm`]).
//!
//! What differs between the families is not the op but its flavour, kept with each family:
//! - the magnitude → argument mapping: torchvision's magnitude tables per policy space (`policy::magnitude`:
//!   `linspace` bins, signed); timm's level functions (`LEVEL_TO_ARG`), where an op's timm name selects the op
//!   and its level ([`super::timm::TimmLevel`]: `PosterizeIncreasing` is [`PolicyOp::Posterize`] with the
//!   increasing level, `TranslateXRel` is [`PolicyOp::TranslateX`] with the width-relative level);
//! - the kernels: torchvision's tensor kernels ([`super::kernels`], [`super::warp`]; `policy::apply_step`) and
//!   Pillow's arithmetic ported step by step (`timm::apply`: `ImageEnhance` blends, `ImageOps`, the affine and
//!   rotate engines). Where the two give the same bytes — the look-up-table ops Invert, Posterize, Solarize and
//!   SolarizeAdd — both call the one kernel of [`super::kernels`].
//!
//! The numbers `_core.sample_op` reports stay each family's own: torchvision's is the discriminant here
//! (RandAugment's order with Invert appended), timm's the position of the op's name in `timm::TIMM_OPS`
//! (timm's `_RAND_TRANSFORMS` order, the `…Increasing` names after it).

/// A sub-op of the policies. The discriminant is torchvision's numbering (`_AUGMENTATION_SPACE` keys in
/// RandAugment's order, Invert appended; what `sample_op` reports for torchvision's policies). Each variant's doc
/// gives torchvision's call for its magnitude `m`, then timm's for its argument `a` (timm's level function of the
/// magnitude).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyOp {
    /// Unchanged (torchvision's `Identity`; timm has none).
    Identity = 0,
    /// torchvision: `affine(shear=[degrees(atan(m)), 0], center=[0, 0])`; timm: `AFFINE (1, a, 0, 0, 1, 0)`.
    ShearX = 1,
    /// torchvision: `affine(shear=[0, degrees(atan(m))], center=[0, 0])`; timm: `AFFINE (1, 0, 0, a, 1, 0)`.
    ShearY = 2,
    /// torchvision: `affine(translate=[int(m), 0])` (pixels); timm (`TranslateXRel`): by `a · width`.
    TranslateX = 3,
    /// torchvision: `affine(translate=[0, int(m)])`; timm (`TranslateYRel`): by `a · height`.
    TranslateY = 4,
    /// torchvision: `rotate(m)` (no expand, image centre); timm: `img.rotate(a)`.
    Rotate = 5,
    /// torchvision: `adjust_brightness(1 + m)`; timm: `ImageEnhance.Brightness(img).enhance(a)`.
    Brightness = 6,
    /// torchvision: `adjust_saturation(1 + m)`; timm: `ImageEnhance.Color(img).enhance(a)`.
    Color = 7,
    /// torchvision: `adjust_contrast(1 + m)`; timm: `ImageEnhance.Contrast(img).enhance(a)`.
    Contrast = 8,
    /// torchvision: `adjust_sharpness(1 + m)`; timm: `ImageEnhance.Sharpness(img).enhance(a)`.
    Sharpness = 9,
    /// torchvision: `posterize(int(m))`; timm: `ImageOps.posterize(a)` (bits ≥ 8: unchanged; ≤ 0: black).
    Posterize = 10,
    /// torchvision: `solarize(255 · m)`; timm: `ImageOps.solarize(a)`.
    Solarize = 11,
    /// torchvision: `autocontrast`; timm: `ImageOps.autocontrast`.
    AutoContrast = 12,
    /// torchvision: `equalize`; timm: `ImageOps.equalize`.
    Equalize = 13,
    /// `invert` / `ImageOps.invert` (torchvision: AutoAugment's policies only).
    Invert = 14,
    /// timm's `SolarizeAdd`: add `a` to the values below 128, clamped to 255 (torchvision has none; its tables never
    /// draw it).
    SolarizeAdd = 15,
}

impl PolicyOp {
    /// Whether the op warps (takes the policy's fill and interpolation).
    pub fn is_warp(self) -> bool {
        matches!(self, Self::ShearX | Self::ShearY | Self::TranslateX | Self::TranslateY | Self::Rotate)
    }
}
