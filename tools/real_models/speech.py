"""Silero VAD's real inputs: spoken sentences between stretches of silence, heard 512 samples at a time.

The speech is synthesized by eSpeak NG (``espeak-ng``, Debian's package of that name), four sentences in
four voices, resampled to 16 kHz. Each stream is quiet room noise (-54 dBFS, seeded), one sentence
starting 0.4 to 0.8 s in, then at least 0.4 s of noise again, so the detector must switch on and off.

The model is fed as Silero's own ``OnnxWrapper`` feeds it: per step 512 new samples with the last 64
samples of the step before in front of them (zeros before the first), ``sr`` 16000, and the state it
returned (``stateN``) as the next ``state``, from zeros. A step is speech when at least half of its 512
new samples lie between the sentence's first and last sample louder than 2% of its peak; the model
says speech when its probability exceeds 0.5 (Silero's ``threshold``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from math import gcd
from pathlib import Path

import numpy as np

from tools.real_models.samples import Streams

SAMPLE_RATE = 16000
CHUNK = 512
CONTEXT = 64
"""Samples of the step before that Silero's wrapper puts in front of each chunk (16 kHz)."""
THRESHOLD = 0.5
"""Silero's default ``threshold``: a step is speech where the probability exceeds it."""
ESPEAK = "espeak-ng"
ESPEAK_PACKAGE = "espeak-ng"
NOISE_LEVEL = 0.002
"""Standard deviation of the room noise under everything (about -54 dBFS)."""
LOUDNESS_FLOOR = 0.02
"""A sample is part of the sentence from the first to the last one louder than this share of its peak."""

SENTENCES = (
    ("The quick brown fox jumps over the lazy dog.", "en-us", 150),
    ("Please call Stella and ask her to bring these things from the store.", "en-gb+f3", 165),
    ("Turn left at the second light, then keep going for two miles.", "en-us+m4", 170),
    ("Seven silver spoons were found under the old wooden table.", "en-gb-scotland+f2", 160),
)
"""Text, eSpeak NG voice (``+fN`` a female variant, ``+mN`` a male one), words per minute."""
LEAD_CHUNKS = (12, 16, 20, 24)
"""Steps of noise before each stream's sentence (0.38 to 0.77 s)."""
TRAIL_CHUNKS = 12
"""At least this many steps of noise after the longest sentence."""


class SynthesizerMissing(RuntimeError):
    """eSpeak NG is not installed; the message says which package brings it."""


def synthesize(text: str, voice: str, speed: int) -> np.ndarray:
    """``text`` spoken by eSpeak NG, as float32 samples in [-1, 1] at 16 kHz."""
    from scipy.io import wavfile
    from scipy.signal import resample_poly

    if shutil.which(ESPEAK) is None:
        raise SynthesizerMissing(f"{ESPEAK} is not installed (Debian package {ESPEAK_PACKAGE})")
    with tempfile.TemporaryDirectory(prefix="onnxsat-speech-") as folder:
        wav = Path(folder) / "speech.wav"
        subprocess.run([ESPEAK, "-v", voice, "-s", str(speed), "-w", str(wav), text], check=True, timeout=60)
        rate, samples = wavfile.read(wav)
    audio = samples.astype(np.float32) / 32768.0
    common = gcd(SAMPLE_RATE, int(rate))
    return resample_poly(audio, SAMPLE_RATE // common, int(rate) // common).astype(np.float32)


def speech_span(sentence: np.ndarray) -> tuple[int, int]:
    """First and one past the last sample of ``sentence`` louder than ``LOUDNESS_FLOOR`` of its peak."""
    loud = np.flatnonzero(np.abs(sentence) > LOUDNESS_FLOOR * np.abs(sentence).max())
    return int(loud[0]), int(loud[-1]) + 1


def step_inputs(audio: np.ndarray) -> np.ndarray:
    """[streams, samples] audio (a whole number of chunks) -> [streams, steps, CONTEXT + CHUNK]: each
    chunk with the previous chunk's last ``CONTEXT`` samples in front (zeros for the first), as
    Silero's ``OnnxWrapper`` builds each step's ``input``."""
    streams, samples = audio.shape
    if samples % CHUNK:
        raise ValueError(f"{samples} samples is not a whole number of {CHUNK}-sample chunks")
    chunks = audio.reshape(streams, samples // CHUNK, CHUNK)
    context = np.zeros((streams, chunks.shape[1], CONTEXT), dtype=np.float32)
    context[:, 1:] = chunks[:, :-1, -CONTEXT:]
    return np.concatenate([context, chunks], axis=2).astype(np.float32)


def speech_streams(model: Path, seed: int = 0) -> Streams:
    """Four streams of noise, one sentence, noise; per stream a [steps] bool array: which steps are speech.

    All streams have the same number of steps: enough for the longest sentence after its lead and
    ``TRAIL_CHUNKS`` of noise after it (167 steps, 5.3 s, with Debian 12's eSpeak NG 1.51)."""
    del model
    rng = np.random.default_rng(seed)
    sentences = [synthesize(*sentence) for sentence in SENTENCES]
    steps = max(lead + -(-len(s) // CHUNK) + TRAIL_CHUNKS for lead, s in zip(LEAD_CHUNKS, sentences, strict=True))
    audio = rng.normal(0.0, NOISE_LEVEL, size=(len(sentences), steps * CHUNK)).astype(np.float32)
    truths = []
    for index, (lead, sentence) in enumerate(zip(LEAD_CHUNKS, sentences, strict=True)):
        peak = 0.3 + 0.1 * index  # a different loudness per stream, none clipping
        start = lead * CHUNK
        audio[index, start : start + len(sentence)] += sentence * (peak / np.abs(sentence).max())
        first, last = speech_span(sentence)
        inside = np.zeros(steps * CHUNK, dtype=bool)
        inside[start + first : start + last] = True
        truths.append(inside.reshape(steps, CHUNK).mean(axis=1) >= 0.5)
    return Streams(step_inputs(audio), tuple(truths))


# --------------------------------------------------------------------------------- reading and agreeing


def speech_steps(probabilities: np.ndarray) -> np.ndarray:
    """[streams, steps, 1] (or [streams, steps]) probabilities -> [streams, steps] bool: speech heard."""
    return probabilities.reshape(probabilities.shape[0], probabilities.shape[1]) > THRESHOLD


def hears_speech(model: Path, output: np.ndarray, truth: Sequence[object], share: float = 0.9) -> list[bool]:
    """Per stream: the model's speech/silence decision matches the truth on at least ``share`` of the steps
    (the detector is a step or two late at each edge, as every VAD is)."""
    del model
    heard = speech_steps(output)
    return [float(np.mean(h == np.asarray(t))) >= share for h, t in zip(heard, truth, strict=True)]


def agreement_with_truth(output: np.ndarray, truth: Sequence[object]) -> float:
    """Share of all steps whose speech/silence decision matches the truth."""
    return float(np.mean(speech_steps(output) == np.stack([np.asarray(t) for t in truth])))


def same_decisions(model: Path, reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of steps (all streams) where the candidate makes the original's speech/silence decision."""
    del model
    return float(np.mean(speech_steps(reference) == speech_steps(candidate)))
