/**
 * The rules and limits of docs/api.md#inference, applied once to
 * the RPC request messages so that REST, Connect and gRPC refuse exactly the
 * same inputs with the same messages. Field names in messages are the JSON
 * names of the REST API (`maxTokens`, `messages[2].content`), which is what an app
 * developer reads.
 */
import type { EmbedRequest, GenerateRequest } from "../../gen/platform/inference/v1/inference_pb.js";
import { Role } from "../../gen/platform/inference/v1/inference_pb.js";
import { invalidArgument } from "../core/errors.ts";
import { characterCount, isWellFormedText } from "../core/text.ts";
import type { ChatRole, ChatTurn, GenerateCall } from "./inference-provider.ts";

export const FAST_MODEL = "platform/fast";
export const EMBED_MODEL = "platform/embed";
export type LogicalModel = typeof FAST_MODEL | typeof EMBED_MODEL;

/** The limits of docs/api.md#inference. */
export const LIMITS = Object.freeze({
  textMaxChars: 100_000,
  messagesMax: 64,
  maxTokensDefault: 1024,
  maxTokensCeiling: 4096,
  temperatureDefault: 0.7,
  temperatureMax: 2,
  embedBatchMax: 96,
});

const ROLES: ReadonlyMap<Role, ChatRole> = new Map([
  [Role.SYSTEM, "system"],
  [Role.USER, "user"],
  [Role.ASSISTANT, "assistant"],
]);

/** Length in characters (code points), not UTF-16 units: an emoji is one character. */
function characters(text: string): number {
  // Code points never outnumber code units, so short strings need no count.
  if (text.length <= LIMITS.textMaxChars) return text.length;
  return characterCount(text);
}

function checkText(field: string, text: string): void {
  const n = characters(text);
  if (n < 1 || n > LIMITS.textMaxChars) throw invalidArgument(field, `must be 1 to ${LIMITS.textMaxChars} characters`);
  // JSON can spell a lone surrogate (`"\ud800"`); it is not text, and no provider can take it.
  if (!isWellFormedText(text)) throw invalidArgument(field, "must be text (it has a lone UTF-16 surrogate)");
}

function checkModel(given: string | undefined, wanted: LogicalModel): LogicalModel {
  const model = given ?? wanted;
  if (model === wanted) return wanted;
  if (model === FAST_MODEL || model === EMBED_MODEL) {
    throw invalidArgument(
      "model",
      wanted === FAST_MODEL
        ? `${EMBED_MODEL} is an embedding model; generate takes ${FAST_MODEL}`
        : `${FAST_MODEL} is a generation model; embed takes ${EMBED_MODEL}`,
    );
  }
  throw invalidArgument("model", `unknown model; the models are ${FAST_MODEL} (generate) and ${EMBED_MODEL} (embed)`);
}

/** A valid generate call (defaults applied, maxTokens clamped) or a 400 naming the field and the rule. */
export function validateGenerate(req: GenerateRequest): { model: LogicalModel; call: GenerateCall } {
  const model = checkModel(req.model, FAST_MODEL);
  const hasPrompt = req.prompt !== undefined;
  const hasMessages = req.messages.length > 0;
  if (hasPrompt === hasMessages) {
    throw invalidArgument(
      "prompt, messages",
      hasPrompt ? "give either prompt or messages, not both" : "give exactly one of prompt and messages",
    );
  }
  let messages: ChatTurn[];
  if (hasPrompt) {
    checkText("prompt", req.prompt!);
    messages = [{ role: "user", content: req.prompt! }];
  } else {
    if (req.messages.length > LIMITS.messagesMax)
      throw invalidArgument("messages", `must have 1 to ${LIMITS.messagesMax} items`);
    messages = req.messages.map((m, i) => {
      const role = ROLES.get(m.role);
      if (!role) throw invalidArgument(`messages[${i}].role`, "must be system, user or assistant");
      checkText(`messages[${i}].content`, m.content);
      return { role, content: m.content };
    });
    if (messages.every((m) => m.role === "system")) {
      throw invalidArgument("messages", "must include at least one user or assistant message");
    }
  }
  let maxTokens: number = LIMITS.maxTokensDefault;
  if (req.maxTokens !== undefined) {
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 1)
      throw invalidArgument("maxTokens", "must be an integer of at least 1");
    maxTokens = Math.min(req.maxTokens, LIMITS.maxTokensCeiling);
  }
  let temperature: number = LIMITS.temperatureDefault;
  if (req.temperature !== undefined) {
    // Written so that NaN (possible over gRPC) fails too.
    if (!(req.temperature >= 0 && req.temperature <= LIMITS.temperatureMax)) {
      throw invalidArgument("temperature", `must be a number from 0 to ${LIMITS.temperatureMax}`);
    }
    temperature = req.temperature;
  }
  return { model, call: { messages, maxTokens, temperature } };
}

/** Valid embed inputs, in order, or a 400 naming the field and the rule. */
export function validateEmbed(req: EmbedRequest): { model: LogicalModel; inputs: string[] } {
  const model = checkModel(req.model, EMBED_MODEL);
  if (req.input.length === 0) throw invalidArgument("input", "is required: a string or an array of 1 or more strings");
  if (req.input.length > LIMITS.embedBatchMax)
    throw invalidArgument("input", `must have at most ${LIMITS.embedBatchMax} items`);
  req.input.forEach((text, i) => checkText(req.input.length === 1 ? "input" : `input[${i}]`, text));
  return { model, inputs: [...req.input] };
}
