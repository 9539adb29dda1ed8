use crate::map_error_code;

use std::io;
use zstd_safe;

/// Allows to compress independently multiple chunks of data.
///
/// Each job will be processed entirely in-memory without streaming, so this
/// is most fitting for many small jobs. To compress larger volume that don't
/// easily fit in memory, a streaming compression may be more appropriate.
///
/// It is more efficient than a streaming compressor for 2 reasons:
/// * It re-uses the zstd context between jobs to avoid re-allocations
/// * It avoids copying data from a `Read` into a temporary buffer before compression.
// Sextant's patch: the context is created on first use. parquet-rs makes a codec, with a
// compressor, for every column chunk it *reads*, and creating a zstd compression context runs
// `cpuid`, which traps to the hypervisor in a virtual machine (22% of a trace lookup's time).
//
// Sextant's patch (2): contexts are reused through a small per-thread pool. A column writer of
// parquet-rs owns a compressor for one column chunk, so every chunk of every segment written
// created a context, and its first frame allocated the level's match tables (megabytes at the
// levels segments use, from the C allocator: fresh pages, faulted in and cleared each time;
// 3% of a node's CPU while ingesting). A pooled context keeps its workspace.
#[derive(Default)]
pub struct Compressor<'a> {
    context: Option<zstd_safe::CCtx<'a>>,
    /// The level a context created on first use gets.
    level: i32,
}

/// Contexts kept per thread for the next compressors (each holds its last workspace): about
/// as many as a Parquet row group has column chunks, whose contexts are alive at once anyway.
const POOL_SIZE: usize = 64;

thread_local! {
    static POOL: std::cell::RefCell<Vec<zstd_safe::CCtx<'static>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Drop for Compressor<'_> {
    fn drop(&mut self) {
        let Some(mut context) = self.context.take() else { return };
        // Resetting the session and the parameters drops any dictionary (loaded copies,
        // referenced dictionaries and prefixes alike) and any frame left open.
        if context
            .reset(zstd_safe::ResetDirective::SessionAndParameters)
            .is_err()
        {
            return;
        }
        // SAFETY: the lifetime only bounds borrowed dictionaries and prefixes, and the reset
        // above made the context drop every one of them.
        let context: zstd_safe::CCtx<'static> =
            unsafe { std::mem::transmute(context) };
        let _ = POOL.try_with(|pool| {
            let mut pool = pool.borrow_mut();
            if pool.len() < POOL_SIZE {
                pool.push(context);
            }
        });
    }
}

impl Compressor<'static> {
    /// Creates a new zstd compressor
    pub fn new(level: i32) -> io::Result<Self> {
        Ok(Compressor { context: None, level })
    }

    /// Creates a new zstd compressor, using the given dictionary.
    ///
    /// Note that using a dictionary means that decompression will need to use
    /// the same dictionary.
    pub fn with_dictionary(level: i32, dictionary: &[u8]) -> io::Result<Self> {
        let mut compressor = Self::default();

        compressor.set_dictionary(level, dictionary)?;

        Ok(compressor)
    }
}

impl<'a> Compressor<'a> {
    fn context(&mut self) -> io::Result<&mut zstd_safe::CCtx<'a>> {
        if self.context.is_none() {
            let pooled = POOL.try_with(|pool| pool.borrow_mut().pop()).ok().flatten();
            let mut context = pooled.unwrap_or_default();
            context
                .set_parameter(zstd_safe::CParameter::CompressionLevel(self.level))
                .map_err(map_error_code)?;
            self.context = Some(context);
        }
        Ok(self.context.as_mut().expect("just created"))
    }

    /// Creates a new compressor using an existing `EncoderDictionary`.
    ///
    /// The compression level will be the one specified when creating the dictionary.
    ///
    /// Note that using a dictionary means that decompression will need to use
    /// the same dictionary.
    pub fn with_prepared_dictionary<'b>(
        dictionary: &'a crate::dict::EncoderDictionary<'b>,
    ) -> io::Result<Self>
    where
        'b: 'a,
    {
        let mut compressor = Self::default();

        compressor.set_prepared_dictionary(dictionary)?;

        Ok(compressor)
    }

    /// Changes the compression level used by this compressor.
    ///
    /// *This will clear any dictionary previously registered.*
    ///
    /// If you want to keep the existing dictionary, you will need to pass it again to
    /// `Self::set_dictionary` instead of using this method.
    pub fn set_compression_level(&mut self, level: i32) -> io::Result<()> {
        self.set_dictionary(level, &[])
    }

    /// Changes the dictionary and compression level used by this compressor.
    ///
    /// Will affect future compression jobs.
    ///
    /// Note that using a dictionary means that decompression will need to use
    /// the same dictionary.
    pub fn set_dictionary(
        &mut self,
        level: i32,
        dictionary: &[u8],
    ) -> io::Result<()> {
        self.level = level;
        self.context()?
            .set_parameter(zstd_safe::CParameter::CompressionLevel(level))
            .map_err(map_error_code)?;

        self.context()?
            .load_dictionary(dictionary)
            .map_err(map_error_code)?;

        Ok(())
    }

    /// Changes the dictionary used by this compressor.
    ///
    /// The compression level used when preparing the dictionary will be used.
    ///
    /// Note that using a dictionary means that decompression will need to use
    /// the same dictionary.
    pub fn set_prepared_dictionary<'b>(
        &mut self,
        dictionary: &'a crate::dict::EncoderDictionary<'b>,
    ) -> io::Result<()>
    where
        'b: 'a,
    {
        self.context()?
            .ref_cdict(dictionary.as_cdict())
            .map_err(map_error_code)?;

        Ok(())
    }

    /// Compress a single block of data to the given destination buffer.
    ///
    /// Returns the number of bytes written, or an error if something happened
    /// (for instance if the destination buffer was too small). A failed job
    /// is abandoned, and the compressor can be set up again for the next one.
    /// With worker threads (see `multithread`), abandoning a job waits for
    /// them to be done with it.
    ///
    /// A level of `0` uses zstd's default (currently `3`).
    /// [`crate::compress_bound()`] says how large `destination` might need to
    /// be. For a `Vec` it is the *capacity* that bounds the output, so
    /// `reserve` what you need rather than `resize` - the bytes do not have to
    /// be initialized first.
    pub fn compress_to_buffer<C: zstd_safe::WriteBuf + ?Sized>(
        &mut self,
        source: &[u8],
        destination: &mut C,
    ) -> io::Result<usize> {
        let context = self.context()?;
        let result = context.compress2(destination, source);
        if result.is_err() {
            // `compress2` leaves a failed frame open, and zstd refuses most
            // setters mid-frame. Abandon it, so the compressor can be set up
            // for the next job. Resetting only the session cannot fail (it
            // waits for the worker threads, if any).
            let _ = context.reset(zstd_safe::ResetDirective::SessionOnly);
        }
        result.map_err(map_error_code)
    }

    /// Compresses a block of data and returns the compressed result.
    ///
    /// A level of `0` uses zstd's default (currently `3`).
    pub fn compress(&mut self, data: &[u8]) -> io::Result<Vec<u8>> {
        // We allocate a big buffer, slightly larger than the input data.
        let buffer_len = zstd_safe::compress_bound(data.len());
        let mut buffer = crate::vec_with_capacity(buffer_len)?;

        self.compress_to_buffer(data, &mut buffer)?;

        // Should we shrink the vec? Meh, let the user do it if he wants.
        Ok(buffer)
    }

    /// Gives mutable access to the internal context.
    pub fn context_mut(&mut self) -> &mut zstd_safe::CCtx<'a> {
        self.context().expect("a zstd compression context")
    }

    /// Sets a compression parameter for this compressor.
    pub fn set_parameter(
        &mut self,
        parameter: zstd_safe::CParameter,
    ) -> io::Result<()> {
        self.context()?
            .set_parameter(parameter)
            .map_err(map_error_code)?;
        Ok(())
    }

    /// Sets the expected size of the input.
    ///
    /// This affects the compression effectiveness.
    ///
    /// It is an error to give an incorrect size (an error will be returned when closing the
    /// stream if the size does not match what was pledged).
    ///
    /// Giving a `None` size means the size is unknown (this is the default).
    pub fn set_pledged_src_size(
        &mut self,
        size: Option<u64>,
    ) -> io::Result<()> {
        self.context()?
            .set_pledged_src_size(size)
            .map_err(map_error_code)?;
        Ok(())
    }

    crate::encoder_parameters!();
}

fn _assert_traits() {
    fn _assert_send<T: Send>(_: T) {}

    _assert_send(Compressor::new(0));
}
