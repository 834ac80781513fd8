/**
 * The offline provider on its own: feature-hashing embeddings that really
 * rank similar texts closer, determinism, and labelled, length-bounded text.
 */
import { describe, expect, it } from "vitest";
import { createLocalProvider, hashEmbedding, LOCAL_EMBEDDING_DIMENSIONS } from "../../src/inference/local-provider.ts";
import { estimateTokens, truncateToTokens } from "../../src/inference/token-estimator.ts";

const cosine = (a: number[], b: number[]) => a.reduce((n, v, i) => n + v * b[i], 0);
const signal = new AbortController().signal;

describe("hashEmbedding", () => {
  it("is deterministic, of fixed length and L2-normalised", () => {
    for (const text of ["hello world", "?!", "   ", "😀 emoji", "x".repeat(5000)]) {
      const v = hashEmbedding(text);
      expect(v).toHaveLength(LOCAL_EMBEDDING_DIMENSIONS);
      expect(v).toEqual(hashEmbedding(text));
      expect(Math.sqrt(cosine(v, v))).toBeCloseTo(1, 9);
    }
  });

  it("ignores case and Unicode compatibility forms", () => {
    expect(hashEmbedding("Café au LAIT")).toEqual(hashEmbedding("café au lait"));
    expect(hashEmbedding("ｆｕｌｌ width")).toEqual(hashEmbedding("full width"));
  });

  it.each([
    ["the cat sat on the mat", "a cat was sitting on the mat", "quarterly revenue grew by ten percent"],
    ["how to cook pasta al dente", "cooking pasta until al dente", "the train to Berlin leaves at noon"],
    [
      "database connection pool exhausted",
      "the connection pool of the database is exhausted",
      "happy birthday to my sister",
    ],
    ["reset my password", "password reset", "weather forecast for tomorrow"],
  ])("ranks %j closer to %j than to %j", (anchor, similar, different) => {
    const a = hashEmbedding(anchor);
    expect(cosine(a, hashEmbedding(similar))).toBeGreaterThan(cosine(a, hashEmbedding(different)));
    expect(cosine(a, hashEmbedding(similar))).toBeGreaterThan(0.3);
  });

  it("sees shared word stems through character trigrams", () => {
    const a = hashEmbedding("connections");
    expect(cosine(a, hashEmbedding("connection"))).toBeGreaterThan(0.3);
    expect(cosine(a, hashEmbedding("connection"))).toBeGreaterThan(cosine(a, hashEmbedding("umbrella")) + 0.15);
  });
});

describe("the local provider", () => {
  const provider = createLocalProvider();

  it("says plainly that it is the offline provider", async () => {
    const r = await provider.generate(
      { messages: [{ role: "user", content: "Who are you?" }], maxTokens: 1024, temperature: 0.7 },
      signal,
    );
    expect(r.text).toMatch(/^\[offline provider\]/);
    expect(r.text).toMatch(/not from a language model/);
    expect(r.finishReason).toBe("stop");
    expect(r.inputTokens).toBe(estimateTokens("Who are you?"));
    expect(r.outputTokens).toBe(estimateTokens(r.text));
    expect(provider.description).toMatch(/offline/);
  });

  it.each([1, 2, 7, 30])("never answers more than maxTokens=%i, and says length when cut", async (maxTokens) => {
    const r = await provider.generate(
      { messages: [{ role: "user", content: "long question ".repeat(50) }], maxTokens, temperature: 0 },
      signal,
    );
    expect(r.outputTokens).toBe(maxTokens);
    expect(estimateTokens(r.text)).toBe(maxTokens);
    expect(r.finishReason).toBe("length");
  });

  it("embeds in order with the estimator's token count", async () => {
    const r = await provider.embed(["one", "two two"], signal);
    expect(r.embeddings).toEqual([hashEmbedding("one"), hashEmbedding("two two")]);
    expect(r.dimensions).toBe(LOCAL_EMBEDDING_DIMENSIONS);
    expect(r.tokens).toBe(1 + 2);
  });
});

describe("token estimator", () => {
  it("is ceil(length / 4), so at least 1 for any non-empty text", () => {
    expect([estimateTokens("a"), estimateTokens("abcd"), estimateTokens("abcde"), estimateTokens("")]).toEqual([
      1, 1, 2, 0,
    ]);
  });

  it("truncates without splitting a surrogate pair", () => {
    const cut = truncateToTokens("abc😀def", 1);
    expect(cut).toBe("abc");
    expect(truncateToTokens("short", 10)).toBe("short");
  });
});
