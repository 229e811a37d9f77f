//! Fuzz bytes read as a sequence of choices. Every input means something: a reader that
//! has run dry answers zero, `false` and empty slices, so a short input is "the simplest
//! choice everywhere" and libFuzzer never spends an execution on a parse error. No
//! `arbitrary` crate: the harness is also compiled into the main test suite, which should not
//! gain a dependency for it.

pub struct Choices<'a> {
    rest: &'a [u8],
}

impl<'a> Choices<'a> {
    pub fn new(data: &'a [u8]) -> Choices<'a> {
        Choices { rest: data }
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((&b, rest)) => {
                self.rest = rest;
                b
            }
            None => 0,
        }
    }

    pub fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A number in `0..n`, for `n` up to 256.
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    /// One of `options`, which must not be empty.
    pub fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.below(options.len())]
    }

    /// A slice of at most 255 bytes: a length byte, then that many bytes (fewer at the end).
    pub fn short(&mut self) -> &'a [u8] {
        let n = usize::from(self.byte());
        self.take(n)
    }

    /// A slice of at most `max` bytes, with a two-byte length, for bodies.
    pub fn long(&mut self, max: usize) -> &'a [u8] {
        let n = usize::from(u16::from_le_bytes([self.byte(), self.byte()])) % (max + 1);
        self.take(n)
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = rest;
        taken
    }
}
