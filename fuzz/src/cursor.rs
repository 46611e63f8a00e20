//! Reading structured values out of fuzz input.
//!
//! Every read succeeds: past the end of the input, integers read as zero
//! and byte runs come back short. That keeps every input meaningful (the
//! fuzzer never wastes executions on "too short" rejections) and makes a
//! truncated input a smaller version of the same scenario, which is what
//! `cargo fuzz tmin` needs to shrink well.

/// A read position in the fuzz input.
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Start reading at the beginning of `data`.
    pub fn new(data: &'a [u8]) -> Cursor<'a> {
        Cursor { data, pos: 0 }
    }

    /// True once every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// Up to `n` bytes; fewer at the end of the input.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = end;
        &self.data[start..end]
    }

    /// A run of bytes preceded by its length (one byte, so at most 255).
    pub fn short_run(&mut self) -> &'a [u8] {
        let n = self.u8() as usize;
        self.take(n)
    }

    /// Everything not yet consumed.
    pub fn rest(&mut self) -> &'a [u8] {
        self.take(usize::MAX)
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let got = self.take(N);
        a[..got.len()].copy_from_slice(got);
        a
    }

    /// One byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    /// A little-endian `u16` (missing bytes read as 0).
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    /// A little-endian `u32` (missing bytes read as 0).
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    /// A little-endian `u64` (missing bytes read as 0).
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_are_zero_or_short() {
        let mut c = Cursor::new(&[1, 2, 3]);
        assert_eq!(c.u16(), 0x0201);
        assert_eq!(c.u32(), 3);
        assert_eq!(c.u64(), 0);
        assert_eq!(c.take(5), &[] as &[u8]);
        assert!(c.is_empty());
        let mut c = Cursor::new(&[9, 8, 7]);
        assert_eq!(c.take(2), &[9, 8]);
        assert_eq!(c.rest(), &[7]);
    }
}
