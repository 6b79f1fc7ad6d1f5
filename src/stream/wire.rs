//! The primitives of every payload: LEB128 varints, zigzag deltas, and a checked cursor over one
//! record's bytes that says where a read went wrong.

/// A problem inside one payload: the byte (from the payload's start) and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Bad {
    pub at: usize,
    pub why: String,
}

/// A payload being read; every read is checked against its end.
pub struct Input<'a> {
    bytes: &'a [u8],
    pub pos: usize,
}

impl<'a> Input<'a> {
    pub fn new(bytes: &'a [u8]) -> Input<'a> {
        Input { bytes, pos: 0 }
    }

    pub fn bad<T>(&self, why: impl Into<String>) -> Result<T, Bad> {
        Err(Bad {
            at: self.pos,
            why: why.into(),
        })
    }

    pub fn at_end(&self) -> bool {
        self.pos == self.bytes.len()
    }

    pub fn u8(&mut self) -> Result<u8, Bad> {
        match self.bytes.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => self.bad("the record ends in the middle of a field (its length is wrong)"),
        }
    }

    /// LEB128: at most 10 bytes, the tenth carrying only the top bit of a u64.
    pub fn varint(&mut self) -> Result<u64, Bad> {
        let start = self.pos;
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                self.pos = start;
                return self.bad("a number over 64 bits (a varint's tenth byte is over 1)");
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        self.pos = start;
        self.bad("a varint longer than 10 bytes")
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, Bad> {
        let start = self.pos;
        let v = self.varint()?;
        u32::try_from(v).or_else(|_| {
            self.pos = start;
            self.bad(format!("{what} {v} does not fit in 32 bits"))
        })
    }

    /// A count bounded by `max`, checked before anything is allocated for it.
    pub fn count(&mut self, what: &str, max: usize) -> Result<usize, Bad> {
        let start = self.pos;
        let v = self.varint()?;
        if v > max as u64 {
            self.pos = start;
            return self.bad(format!(
                "{v} {what} (more than the {max} a stream may hold)"
            ));
        }
        Ok(v as usize)
    }

    pub fn delta(&mut self, from: u64) -> Result<u64, Bad> {
        Ok(from.wrapping_add(unzigzag(self.varint()?) as u64))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Bad> {
        if self.bytes.len() - self.pos < n {
            return self.bad("the record ends in the middle of a field (its length is wrong)");
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// An option's tag byte: 0 for none, 1 for some.
    pub fn tag(&mut self, what: &str) -> Result<bool, Bad> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            t => {
                self.pos -= 1;
                self.bad(format!("invalid {what} tag {t}"))
            }
        }
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// `to` as a signed difference from `from`; wrapping, so every pair of u64 round-trips.
pub fn put_delta(out: &mut Vec<u8>, from: u64, to: u64) {
    put_varint(out, zigzag(to.wrapping_sub(from) as i64));
}
