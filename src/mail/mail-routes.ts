/** The SPEC.md `/v1/mail` route, mapped onto `MailService`. */
import { z } from "zod";
import { MailService } from "../../gen/platform/mail/v1/mail_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { jsonObject } from "../core/http/validation.ts";

/** The JSON shape of `POST /v1/mail/send`; missing fields become "" and get the implementation's "is required". */
export const SendBody = jsonObject({
  to: z.string().default(""),
  subject: z.string().default(""),
  text: z.string().default(""),
});

export const mailRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "POST",
    url: "/v1/mail/send",
    rpc: MailService.method.sendMail,
    body: SendBody,
    request: ({ body }) => body,
    response: (out) => ({ sent: out.sent, from: out.from, remainingToday: Number(out.remainingToday) }),
  }),
];
