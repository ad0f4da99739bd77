//! `bsor_stream._native`: the Rust half of the Python package `bsor_stream`.
//!
//! Every load fills plain Rust vectors with the GIL released (`columns::Columns`), then hands each
//! vector to NumPy, which keeps the vector's buffer as the array's memory (no copy, no Python
//! object per record). The Python half (`bsor_stream/__init__.py`) wraps the result in a
//! `Replay` class and adds pandas, Arrow and Parquet output.

#![forbid(unsafe_code)]

mod columns;
mod write;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use columns::{Columns, LoadError};

/// Where a replay comes from: a file (read with the GIL released) or bytes.
enum Source<'a> {
    Path(PathBuf),
    Bytes(&'a [u8]),
}

fn load_source(src: Source<'_>, events_only: bool) -> Result<Columns, LoadError> {
    match src {
        Source::Path(p) => {
            // A BSOR file is read a piece of its frames at a time, straight into the
            // columns; anything else (or a BSOR that does not read that way) whole.
            if let Some(cols) = columns::load_bsor_file(&p, events_only) {
                return Ok(cols);
            }
            let bytes = std::fs::read(&p).map_err(|e| LoadError::io(&p, &e))?;
            columns::load(&bytes, events_only).map_err(|e| e.in_file(&p))
        }
        Source::Bytes(b) => columns::load(b, events_only),
    }
}

/// Raises `bsor_stream.ReplayError(message, section, offset, path)`.
fn raise(py: Python<'_>, e: LoadError) -> PyErr {
    match error_object(py, &e) {
        Ok(obj) => PyErr::from_value(obj),
        Err(err) => err,
    }
}

fn error_object<'py>(py: Python<'py>, e: &LoadError) -> PyResult<Bound<'py, PyAny>> {
    let cls = py.import("bsor_stream._errors")?.getattr("ReplayError")?;
    cls.call1((
        e.message.clone(),
        e.section.clone(),
        e.offset,
        e.path.clone(),
    ))
}

fn load_impl(py: Python<'_>, src: &Bound<'_, PyAny>, events_only: bool) -> PyResult<Py<PyDict>> {
    let cols = if let Ok(b) = src.cast::<PyBytes>() {
        let bytes = b.as_bytes();
        py.detach(|| load_source(Source::Bytes(bytes), events_only))
    } else if let Ok(p) = src.extract::<PathBuf>() {
        py.detach(|| load_source(Source::Path(p), events_only))
    } else {
        return Err(PyValueError::new_err(
            "expected a path (str or os.PathLike) or bytes",
        ));
    };
    let cols = cols.map_err(|e| raise(py, e))?;
    Ok(cols.into_py_dict(py)?.unbind())
}

/// Reads a BSOR, `.bsors` or XROR replay from a path or from bytes into a dict of NumPy
/// arrays (the `Replay` class of the Python package wraps it).
#[pyfunction]
fn load(py: Python<'_>, src: &Bound<'_, PyAny>) -> PyResult<Py<PyDict>> {
    load_impl(py, src, false)
}

/// Like [`load`] without decoding poses: a `.bsors` reads only its event chunks, a BSOR
/// steps over its frame section.
#[pyfunction]
fn load_events(py: Python<'_>, src: &Bound<'_, PyAny>) -> PyResult<Py<PyDict>> {
    load_impl(py, src, true)
}

/// Loads files on `threads` threads (all of the machine's by default) with the GIL
/// released: a list with, for each path in order, a dict or a `ReplayError`.
#[pyfunction]
#[pyo3(signature = (paths, threads=None, events_only=false))]
fn load_many(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    threads: Option<usize>,
    events_only: bool,
) -> PyResult<Py<PyList>> {
    let n = paths.len();
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, n.max(1));
    let results: Vec<Mutex<Option<Result<Columns, LoadError>>>> =
        (0..n).map(|_| Mutex::new(None)).collect();
    py.detach(|| {
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = paths.get(i) else { break };
                    // A panic would be a bug; it still becomes this file's error, never the
                    // batch's end.
                    let r = std::panic::catch_unwind(|| {
                        load_source(Source::Path(path.clone()), events_only)
                    })
                    .unwrap_or_else(|_| Err(LoadError::internal(path)));
                    if let Ok(mut slot) = results[i].lock() {
                        *slot = Some(r);
                    }
                });
            }
        });
    });
    let out = PyList::empty(py);
    for (slot, path) in results.into_iter().zip(&paths) {
        let r = slot
            .into_inner()
            .ok()
            .flatten()
            .unwrap_or_else(|| Err(LoadError::internal(path)));
        match r {
            Ok(c) => out.append(c.into_py_dict(py)?)?,
            Err(e) => out.append(error_object(py, &e)?)?,
        }
    }
    Ok(out.unbind())
}

/// Writes a replay (the dict the Python `Replay` gives) as BSOR bytes.
#[pyfunction]
fn to_bsor(py: Python<'_>, replay: &Bound<'_, PyDict>) -> PyResult<Py<PyBytes>> {
    let r = write::replay_from_dict(replay)?;
    let bytes = py
        .detach(|| bsor_stream_core::bsor::to_vec(&r))
        .map_err(|e| PyValueError::new_err(format!("cannot write BSOR: {e}")))?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// Writes a replay as `.bsors` bytes with a profile (`lossless`, `fine`, `compact`), for an
/// archive (a keyframe every 10 s) or for live viewing (every second).
#[pyfunction]
#[pyo3(signature = (replay, profile="lossless", archive=true))]
fn encode(
    py: Python<'_>,
    replay: &Bound<'_, PyDict>,
    profile: &str,
    archive: bool,
) -> PyResult<Py<PyBytes>> {
    use bsor_stream_core::stream::{Profile, Settings};
    let profile = match profile {
        "lossless" => Profile::Lossless,
        "fine" => Profile::Fine,
        "compact" => Profile::Compact,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown profile {other:?} (lossless, fine or compact)"
            )))
        }
    };
    let settings = if archive {
        Settings::archive(profile)
    } else {
        Settings::live(profile)
    };
    let r = write::replay_from_dict(replay)?;
    let bytes = py.detach(|| bsor_stream_core::transcode::encode_replay(&r, settings));
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// A synthetic replay (`bsor_stream_core::synth`) as BSOR bytes: walls, bombs, pauses,
/// height changes, controller offsets and user data, for tests and examples.
#[pyfunction]
#[pyo3(signature = (seed=1, seconds=20.0, fps=60))]
fn synth_bsor(py: Python<'_>, seed: u64, seconds: f32, fps: u32) -> PyResult<Py<PyBytes>> {
    let r =
        bsor_stream_core::synth::replay(bsor_stream_core::synth::Settings { seed, seconds, fps });
    let bytes = bsor_stream_core::bsor::to_vec(&r)
        .map_err(|e| PyValueError::new_err(format!("cannot write BSOR: {e}")))?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// The Rust stream decoder alone on `.bsors` bytes (into the core's `Replay`, no arrays),
/// with the GIL released: what `python/bench.py` compares `load` with. Returns the frames.
#[pyfunction]
fn _decode_stream_only(py: Python<'_>, data: &Bound<'_, PyBytes>) -> PyResult<usize> {
    let bytes = data.as_bytes();
    py.detach(|| bsor_stream_core::transcode::decode_replay(bytes))
        .map(|(r, _)| r.frames.len())
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Reshapes a flat vector into an array of `shape` without copying.
pub(crate) fn array<'py, T: numpy::Element>(
    py: Python<'py>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let a = v.into_pyarray(py);
    if shape.len() == 1 {
        return Ok(a.into_any());
    }
    Ok(a.reshape(shape)?.into_any())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(load_events, m)?)?;
    m.add_function(wrap_pyfunction!(load_many, m)?)?;
    m.add_function(wrap_pyfunction!(to_bsor, m)?)?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(synth_bsor, m)?)?;
    m.add_function(wrap_pyfunction!(_decode_stream_only, m)?)?;
    Ok(())
}
