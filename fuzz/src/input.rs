//! A cursor that turns fuzz bytes into choices. Past the end every read gives
//! zeros, so any input, even an empty one, is a complete scenario.

pub(crate) struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Input { data, pos: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub(crate) fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    /// Little-endian, from `n` bytes (at most 8).
    fn uint(&mut self, n: usize) -> u64 {
        (0..n).fold(0, |acc, i| acc | (u64::from(self.u8()) << (8 * i)))
    }

    pub(crate) fn u32(&mut self) -> u32 {
        self.uint(4) as u32
    }

    pub(crate) fn u64(&mut self) -> u64 {
        self.uint(8)
    }

    pub(crate) fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = start.saturating_add(n);
        &self.data[start..end]
    }
}
