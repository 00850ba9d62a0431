//! site — where an op sits in a compiled transform list (`transforms[3].transforms[1]`): names the op in
//! configuration errors and picks its random stream. Its own file because both the op table ([`super::ops`]) and
//! the ops it dispatches to (e.g. [`super::timm`]) name sites, and a room's files must not import each other in
//! a cycle.

/// The most ops a container (`RandomApply`, `RandomChoice`, `RandomOrder`) may hold: an inner position takes 6
/// bits of its stream id ([`Site::stream`]).
pub const MAX_CONTAINER_OPS: usize = 64;
/// How deep containers may nest (a container in a container in a container): each level takes 6 bits of the
/// stream id.
pub const MAX_NESTING: usize = 3;
/// The list positions a container may sit at (10 bits of its inner ops' stream ids).
pub const MAX_CONTAINER_POSITION: usize = 1024;

/// Where an op sits in the user's list: its position, and for an op inside containers the inner positions
/// (`transforms[3].transforms[1]`). Names the op in messages and picks its random stream ([`Site::stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// Top-level position, then the inner position at each nesting level.
    path: [u32; MAX_NESTING + 1],
    /// Nesting levels below the top (0: a top-level op).
    depth: u8,
}

impl Site {
    /// The op at list position `pos`.
    pub fn top(pos: usize) -> Self {
        Self { path: [pos as u32, 0, 0, 0], depth: 0 }
    }

    /// Inner op `i` of the container at `self` (the caller, `OpSpec::check_at`, keeps `depth < MAX_NESTING`
    /// and `i < MAX_CONTAINER_OPS`; past them the path saturates instead of indexing out of bounds).
    pub fn child(self, i: usize) -> Self {
        let d = (usize::from(self.depth) + 1).min(MAX_NESTING);
        let mut path = self.path;
        path[d] = i.min(MAX_CONTAINER_OPS - 1) as u32;
        Self { path, depth: d as u8 }
    }

    /// The top-level list position.
    pub fn position(self) -> usize {
        self.path[0] as usize
    }

    /// Nesting levels below the top.
    pub fn depth(self) -> usize {
        usize::from(self.depth)
    }

    /// The op's stream id (the `op` word of [`SampleRng::new`]): `OP_BASE + pos` at the top level (as before
    /// containers existed); inside containers `depth << 28 | pos << 18 | i1 << 12 | i2 << 6 | i3` — depth 1..=3
    /// in the top nibble, pos < [`MAX_CONTAINER_POSITION`] and each inner position < [`MAX_CONTAINER_OPS`]
    /// (checked by `OpSpec::check_at`), so two sites never share a stream, and none meets `OP_BASE + pos`
    /// (below `1 << 28` for any list a machine can hold) or rng.rs's fixed ids (top nibble 4 or 5). A sample's
    /// pixels thus stay a function of (seed, epoch, index, op position) with nested ops included.
    pub fn stream(self) -> u32 {
        if self.depth == 0 {
            return crate::rng::OP_BASE.wrapping_add(self.path[0]);
        }
        let [p, a, b, c] = self.path;
        (u32::from(self.depth) << 28) | (p << 18) | (a << 12) | (b << 6) | c
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "transforms[{}]", self.path[0])?;
        for i in &self.path[1..=usize::from(self.depth)] {
            write!(f, ".transforms[{i}]")?;
        }
        Ok(())
    }
}
