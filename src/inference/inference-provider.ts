/**
 * The seam between the inference facility and whatever runs the models. The
 * facility validates requests, takes and settles the daily allowance and
 * names the logical models; a provider only turns an already valid call into
 * text or vectors and reports what it used. Two implementations exist: the
 * offline `local` provider (the default) and Amazon Bedrock.
 *
 * A provider throws `PlatformError` only: `invalid_argument` when the input
 * itself was refused, `upstream_error` for anything else, never with the
 * provider's own wording (it may name accounts, models or regions).
 */

export type ChatRole = "system" | "user" | "assistant";

export interface ChatTurn {
  readonly role: ChatRole;
  readonly content: string;
}

/** A validated generate call: defaults applied, maxTokens already clamped. */
export interface GenerateCall {
  readonly messages: readonly ChatTurn[];
  readonly maxTokens: number;
  readonly temperature: number;
}

export type FinishReason = "stop" | "length" | "other";

export interface GenerateResult {
  readonly text: string;
  readonly finishReason: FinishReason;
  readonly inputTokens: number;
  readonly outputTokens: number;
}

export interface EmbedResult {
  /** One vector per input, in input order, each of `dimensions` numbers. */
  readonly embeddings: number[][];
  readonly dimensions: number;
  readonly tokens: number;
}

export interface InferenceProvider {
  readonly name: "local" | "bedrock";
  /** One line for the start-up log: what serves the logical models. */
  readonly description: string;
  generate(call: GenerateCall, signal: AbortSignal): Promise<GenerateResult>;
  embed(inputs: readonly string[], signal: AbortSignal): Promise<EmbedResult>;
  /** Resolves when the provider answers (for `/ready`); the local provider, in-process, has none. */
  ping?(signal: AbortSignal): Promise<void>;
  close?(): void;
}
