/**
 * The embedded default provider: offline, deterministic, no model weights.
 * It exists so that an app can be developed and tested against the real API
 * shape (quotas, validation, vector lengths) without any cloud account, and it
 * says so plainly: its generated text announces that it is the offline
 * provider and is never presented as a model's answer.
 *
 * Embeddings use feature hashing (the "hashing trick"): word unigrams, word
 * bigrams and character trigrams of each word are hashed into a fixed number
 * of signed buckets, then the vector is L2-normalised. Texts that share words
 * and phrases share buckets, so their cosine similarity is really higher than
 * that of unrelated texts; the same text always gives the same vector.
 */
import type { EmbedResult, GenerateCall, GenerateResult, InferenceProvider } from "./inference-provider.ts";
import { estimateTokens, estimateTokensOfAll, truncateToTokens } from "./token-estimator.ts";

/** Length of every local embedding. */
export const LOCAL_EMBEDDING_DIMENSIONS = 256;

const UNIGRAM_WEIGHT = 1;
const BIGRAM_WEIGHT = 0.7;
const TRIGRAM_WEIGHT = 0.25;
const EXCERPT_CHARS = 160;

const FNV_OFFSET = 0x811c9dc5;

/** 32-bit FNV-1a over UTF-16 code units of `text[start, end)`, continuing from `hash`: stable across runs and platforms. */
function fnv1a(text: string, hash = FNV_OFFSET, start = 0, end = text.length): number {
  for (let i = start; i < end; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

// Each kind of feature hashes from its own seed, so a word and a trigram never collide by construction.
const UNIGRAM_SEED = fnv1a("w:");
const BIGRAM_SEED = fnv1a("b:");
const TRIGRAM_SEED = fnv1a("c:");
/** Character trigrams are taken from at most this many characters of a word: enough for any real word, bounded for junk. */
const TRIGRAM_SPAN = 64;

function words(text: string): string[] {
  const normalised = text.normalize("NFKC").toLowerCase();
  const found = normalised.match(/[\p{L}\p{N}]+/gu);
  if (found) return found;
  // Only punctuation or symbols: those are the "words" then.
  return normalised.split(/\s+/).filter((w) => w.length > 0);
}

/** A deterministic, L2-normalised feature-hashing embedding of `text`. */
export function hashEmbedding(text: string, dimensions = LOCAL_EMBEDDING_DIMENSIONS): number[] {
  const vector = new Float64Array(dimensions);
  const add = (hash: number, weight: number) => {
    // The low bits pick the bucket, the top bit the sign, so collisions cancel out on average.
    vector[hash % dimensions] += hash & 0x80000000 ? -weight : weight;
  };
  const tokens = words(text);
  for (let i = 0; i < tokens.length; i++) {
    const word = tokens[i];
    add(fnv1a(word, UNIGRAM_SEED), UNIGRAM_WEIGHT);
    if (i > 0) add(fnv1a(word, fnv1a(" ", fnv1a(tokens[i - 1], BIGRAM_SEED))), BIGRAM_WEIGHT);
    const padded = `#${word.length > TRIGRAM_SPAN ? word.slice(0, TRIGRAM_SPAN) : word}#`;
    for (let j = 0; j + 3 <= padded.length; j++) add(fnv1a(padded, TRIGRAM_SEED, j, j + 3), TRIGRAM_WEIGHT);
  }
  if (tokens.length === 0) add(fnv1a("empty"), 1);
  let norm = 0;
  for (const v of vector) norm += v * v;
  norm = Math.sqrt(norm);
  // A feature set can cancel out exactly only in theory; keep the vector finite anyway.
  return Array.from(vector, (v) => (norm > 0 ? v / norm : 0));
}

/** The offline answer: plainly labelled, deterministic, cut to `maxTokens`. */
function offlineAnswer(call: GenerateCall, inputTokens: number): string {
  const lastUser = [...call.messages].reverse().find((m) => m.role === "user") ?? call.messages.at(-1)!;
  const flat = lastUser.content.replace(/\s+/g, " ").trim();
  const excerpt = flat.length > EXCERPT_CHARS ? `${truncateToTokens(flat, EXCERPT_CHARS / 4)}…` : flat;
  const count = call.messages.length;
  return (
    "[offline provider] This reply comes from the platform's built-in offline inference provider, " +
    "not from a language model, so it does not answer questions. " +
    `It received ${count} message${count === 1 ? "" : "s"} (${inputTokens} tokens); ` +
    `the last ${lastUser.role} message reads: "${excerpt}"`
  );
}

export function createLocalProvider(): InferenceProvider {
  return {
    name: "local",
    description:
      "local (offline and deterministic: generated text is a labelled placeholder, not a language model; " +
      `embeddings are ${LOCAL_EMBEDDING_DIMENSIONS}-dimensional feature hashes)`,

    async generate(call): Promise<GenerateResult> {
      const inputTokens = estimateTokensOfAll(call.messages.map((m) => m.content));
      const full = offlineAnswer(call, inputTokens);
      const text = truncateToTokens(full, call.maxTokens);
      return {
        text,
        finishReason: text.length < full.length ? "length" : "stop",
        inputTokens,
        outputTokens: estimateTokens(text),
      };
    },

    async embed(inputs): Promise<EmbedResult> {
      return {
        embeddings: inputs.map((text) => hashEmbedding(text)),
        dimensions: LOCAL_EMBEDDING_DIMENSIONS,
        tokens: estimateTokensOfAll(inputs),
      };
    },
  };
}
