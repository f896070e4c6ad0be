//! A chunked body (RFC 9112 §7.1) followed byte by byte, across syscalls.

/// CRLF ending a chunk's data + "0\r\n\r\n", the last chunk without trailers.
pub(super) const LAST_CHUNK_TAIL: u64 = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChunkState {
    /// In a chunk-size line; `digits` hex digits read so far, `in_ext` past a ';'.
    Size {
        size: u64,
        digits: u8,
        in_ext: bool,
    },
    Data {
        remaining: u64,
    },
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer section after the last chunk; `line_len` bytes of the current line.
    Trailer {
        line_len: u32,
    },
}

impl ChunkState {
    /// Where a chunked body, and each chunk after the previous one's data, starts.
    pub(super) const FIRST_SIZE: ChunkState = ChunkState::Size {
        size: 0,
        digits: 0,
        in_ext: false,
    };
}

/// Runs the chunked-body state machine over `data`. Returns (bytes consumed, new state,
/// finished); `Err(consumed)` when the bytes are not chunked encoding.
pub(super) fn chunk_step(
    mut st: ChunkState,
    data: &[u8],
) -> Result<(usize, ChunkState, bool), usize> {
    let mut i = 0;
    while i < data.len() {
        match &mut st {
            ChunkState::Data { remaining } => {
                let take = (*remaining).min((data.len() - i) as u64) as usize;
                i += take;
                *remaining -= take as u64;
                if *remaining == 0 {
                    st = ChunkState::DataEnd;
                }
            }
            ChunkState::Size {
                size,
                digits,
                in_ext,
            } => {
                let c = data[i];
                i += 1;
                match c {
                    b'\n' => {
                        if *digits == 0 {
                            return Err(i);
                        }
                        st = if *size == 0 {
                            ChunkState::Trailer { line_len: 0 }
                        } else {
                            ChunkState::Data { remaining: *size }
                        };
                    }
                    b'\r' => {}
                    _ if *in_ext => {}
                    b';' => *in_ext = true,
                    b' ' | b'\t' => {}
                    _ => {
                        let v = (c as char).to_digit(16).ok_or(i)?;
                        if *digits >= 16 {
                            return Err(i);
                        }
                        *size = (*size << 4) | v as u64;
                        *digits += 1;
                    }
                }
            }
            ChunkState::DataEnd => {
                let c = data[i];
                i += 1;
                match c {
                    b'\r' => {}
                    b'\n' => st = ChunkState::FIRST_SIZE,
                    _ => return Err(i),
                }
            }
            ChunkState::Trailer { line_len } => {
                let c = data[i];
                i += 1;
                match c {
                    b'\r' => {}
                    b'\n' => {
                        if *line_len == 0 {
                            return Ok((i, st, true));
                        }
                        *line_len = 0;
                    }
                    _ => *line_len = line_len.saturating_add(1),
                }
            }
        }
    }
    Ok((i, st, false))
}
