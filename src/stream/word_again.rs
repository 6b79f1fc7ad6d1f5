//! The word-again record (format 4): the GIL's words as the sampler read them a second time, after a
//! tick's kernel readings, where they had changed since the first read (`Sample::word_again`). It
//! comes just before the sample it belongs to, and only at the rare ticks that have one, so a
//! sample record (whose flags byte is full) did not need a new field.

use super::wire::{Bad, Input, put_varint};
use crate::addr::RemoteAddr;
use crate::observed::GilWord;

/// locked (a byte, 0 or 1), last holder and switch number varints, the interval as an option (a tag
/// byte, then a varint).
pub fn encode(word: &GilWord, out: &mut Vec<u8>) {
    out.push(u8::from(word.locked));
    put_varint(out, word.last_holder.0);
    put_varint(out, word.switch_number);
    match word.interval_us {
        None => out.push(0),
        Some(us) => {
            out.push(1);
            put_varint(out, us);
        }
    }
}

pub fn decode(input: &mut Input<'_>) -> Result<GilWord, Bad> {
    let locked = input.tag("locked flag")?;
    let last_holder = RemoteAddr(input.varint()?);
    let switch_number = input.varint()?;
    let interval_us = if input.tag("interval")? {
        Some(input.varint()?)
    } else {
        None
    };
    Ok(GilWord {
        locked,
        last_holder,
        switch_number,
        interval_us,
    })
}
