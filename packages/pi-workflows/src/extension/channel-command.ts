// `/workflow-channel status|setup|reload|recover` (docs/CHANNELS.md): the external decision
// channels, through the server's `channel.*` operations. `setup` explains where the private
// files go and checks what is there; it never asks for a token (a token typed into Pi would
// sit in its editor history), so the bot token is only ever written to its file by the user.
import type { WorkflowClient } from "../client/client.js";
import type { JsonObject } from "../client/protocol.js";
import type { PiApi, PiContext } from "./pi-types.js";

export const CHANNEL_SUBCOMMANDS = ["status", "setup", "reload", "recover"] as const;
const CHANNEL_MESSAGE_ID = /^cm-[0-9a-f]{1,64}$/;
/** Messages a status lists in Pi, at most (the CLI's `channel status` has them all). */
const STATUS_MESSAGES_MAX = 10;

export interface ChannelHost {
  /** The connected client (starting the server on demand). */
  client(): Promise<WorkflowClient>;
  notify(message: string, type: "info" | "warning" | "error"): void;
  setContext(ctx: PiContext): void;
  /** The config directory the server reads (`PI_WORKFLOWS_CONFIG_DIR`, else ~/.config/pi-workflows). */
  configDir(): string;
}

export class ChannelUsageError extends Error {}

type Parsed = { sub: "status" | "setup" | "reload" } | { sub: "recover"; channelMessageId: string; action: "confirm" | "retry" };

export function parseChannelCommand(args: string): Parsed {
  const [sub = "status", ...rest] = args.trim().split(/\s+/).filter(Boolean);
  if (sub === "status" || sub === "setup" || sub === "reload") {
    if (rest.length > 0) throw new ChannelUsageError(`usage: /workflow-channel ${sub}`);
    return { sub };
  }
  if (sub === "recover") {
    const [id, action] = rest;
    if (rest.length !== 2 || !CHANNEL_MESSAGE_ID.test(id ?? "") || (action !== "confirm" && action !== "retry")) {
      throw new ChannelUsageError("usage: /workflow-channel recover <cm-id> confirm|retry (the cm-id is in /workflow-channel status)");
    }
    return { sub, channelMessageId: id!, action };
  }
  throw new ChannelUsageError(`/workflow-channel takes ${CHANNEL_SUBCOMMANDS.join(", ")}`);
}

export function registerChannelCommand(pi: PiApi, host: ChannelHost): void {
  pi.registerCommand("workflow-channel", {
    description: "pi-workflows decision channels (Telegram): status, setup, reload, recover <cm-id> confirm|retry",
    getArgumentCompletions: (prefix) =>
      CHANNEL_SUBCOMMANDS.filter((sub) => sub.startsWith(prefix.trim())).map((sub) => ({ value: sub, label: sub })),
    handler: async (args, ctx) => {
      host.setContext(ctx);
      let parsed: Parsed;
      try {
        parsed = parseChannelCommand(args);
      } catch (error) {
        host.notify(`/workflow-channel: ${(error as Error).message}`, "warning");
        return;
      }
      try {
        host.notify(await runChannelCommand(parsed, host), "info");
      } catch (error) {
        host.notify(`/workflow-channel ${parsed.sub}: ${(error as Error).message}`, "error");
      }
    },
  });
}

export async function runChannelCommand(parsed: Parsed, host: ChannelHost): Promise<string> {
  if (parsed.sub === "setup") return setupText(host.configDir(), await statusOrUndefined(host));
  const client = await host.client();
  const key = `channel:${parsed.sub}:${Date.now()}:${Math.random().toString(16).slice(2)}`;
  switch (parsed.sub) {
    case "status":
      return statusText(await client.call("channel.status", { payload: {} }));
    case "reload": {
      const report = await client.call("channel.reload", { payload: {}, idempotencyKey: key });
      return `channels reloaded: started ${list(report.started)}; stopped ${list(report.stopped)}; unchanged ${list(report.unchanged)}`;
    }
    case "recover": {
      const receipt = await client.call("channel.recover", {
        payload: { channelMessageId: parsed.channelMessageId, action: parsed.action },
        idempotencyKey: key,
      });
      const warning = typeof receipt.warning === "string" ? ` Warning: ${receipt.warning}.` : "";
      return `${String(receipt.effectType)} of ${parsed.channelMessageId} recorded as ${parsed.action}.${warning}`;
    }
  }
}

async function statusOrUndefined(host: ChannelHost): Promise<JsonObject | undefined> {
  try {
    return await (await host.client()).call("channel.status", { payload: {} });
  } catch {
    return undefined;
  }
}

function list(value: unknown): string {
  const names = Array.isArray(value) ? value.filter((name): name is string => typeof name === "string") : [];
  return names.length > 0 ? names.join(", ") : "none";
}

const str = (value: unknown): string => (typeof value === "string" ? value : "-");

export function statusText(status: JsonObject): string {
  const lines: string[] = [];
  if (typeof status.configError === "string") lines.push(`Configuration refused (the last good one stays): ${status.configError}`);
  const profiles = Array.isArray(status.profiles) ? (status.profiles as JsonObject[]) : [];
  if (profiles.length === 0) lines.push("No Telegram profiles: decisions show here and in the CLI. /workflow-channel setup explains how to add one.");
  for (const profile of profiles) {
    const last = typeof profile.lastExit === "string" ? `, last exit: ${profile.lastExit}` : "";
    lines.push(`Profile ${str(profile.profile)}: ${str(profile.state)} (epoch ${String(profile.epoch ?? "-")}, ${String(profile.launches ?? 0)} launches${last})`);
  }
  const messages = Array.isArray(status.messages) ? (status.messages as JsonObject[]) : [];
  for (const message of messages.slice(0, STATUS_MESSAGES_MAX)) {
    const effect = Array.isArray(message.lastEffect) ? (message.lastEffect as unknown[]).map(str).join(" ") : "-";
    lines.push(`  ${str(message.channelMessageId)} run ${str(message.runId)} ${str(message.profile)} ${str(message.state)} (last: ${effect})`);
  }
  if (messages.length > STATUS_MESSAGES_MAX) lines.push(`  … ${messages.length - STATUS_MESSAGES_MAX} more (pi-workflows channel status)`);
  const unrouted = Array.isArray(status.unroutedAudiences) ? status.unroutedAudiences.filter((name): name is string => typeof name === "string") : [];
  if (unrouted.length > 0) {
    lines.push(`Waiting decisions name audiences channels.json does not define: ${unrouted.join(", ")} (shown here and in the CLI only).`);
  }
  if (Number(status.ambiguous ?? 0) > 0) {
    lines.push("An ambiguous send may or may not have reached Telegram: check the chat, then /workflow-channel recover <cm-id> confirm|retry.");
  }
  return lines.join("\n");
}

export function setupText(configDir: string, status: JsonObject | undefined): string {
  const current = status ? statusText(status) : "The server is not reachable right now; its status shows after /workflow-channel reload.";
  return [
    "Telegram decision channel set-up (docs/CHANNELS.md):",
    "1. Create a bot with @BotFather (/newbot) and copy its token.",
    `2. In a terminal (not here): (umask 077; cat > ${configDir}/ops.token) — paste the token, then Ctrl-D.`,
    `3. Write ${configDir}/credentials.json: {"schema":"pi-workflows.credentials.v1","credentials":{"ops-bot":{"kind":"telegramBotToken","tokenFile":"${configDir}/ops.token"}}}`,
    `4. Write ${configDir}/channels.json: {"schema":"pi-workflows.channels.v1","audiences":{"operator":{"channels":["pi","telegram:ops"]}},"telegram":{"ops":{"credential":"ops-bot","allowedUserIds":[<your id>],"allowedChatIds":[<chat id>]}}}`,
    "5. chmod 600 both files, then /workflow-channel reload.",
    "",
    current,
  ].join("\n");
}
