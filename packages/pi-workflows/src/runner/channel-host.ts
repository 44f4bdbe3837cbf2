// The engine's Host implemented over the runner channel: one method, one message kind.
import type { EffectReservation, Host } from "../engine/host.js";
import type { RunnerSession } from "./session.js";

export function channelHost(session: RunnerSession): Host {
  const send = async (kind: string, payload: Record<string, unknown>, attemptId?: string) => {
    await session.send(kind, payload, attemptId);
  };
  return {
    nodeStarted: (attemptId, start) => send("node.started", { ...start }, attemptId),
    nodeUpdate: (attemptId, update) => send("node.update", { ...update }, attemptId),
    nodeFinished: (attemptId, { output, start }) => send("node.finished", { ...start, output }, attemptId),
    nodeFailed: (attemptId, { error, start }) => send("node.failed", { ...start, error }, attemptId),
    runFinished: (result) => send("run.finished", { ...result }),
    runParked: (reason) => send("run.parked", { reason }),
    interactionAccepted: (attemptId, verdict) => send("interaction.accepted", { ...verdict }, attemptId),
    interactionRejected: (attemptId, verdict) => send("interaction.rejected", { ...verdict }, attemptId),
    interactionRequested: (attemptId, request) => send("interaction.requested", { ...request }, attemptId),
    notificationRequested: (attemptId, request) => send("notification.requested", { ...request }, attemptId),
    effectReserve: async (attemptId, request) => {
      const response = await session.send("effect.reserve", { ...request }, attemptId);
      const result = response.result as EffectReservation | undefined;
      if (!result || typeof result.effectId !== "string" || typeof result.execute !== "boolean") {
        throw new Error("effect.reserve answered without {effectId, status, execute}");
      }
      return result;
    },
    effectSettle: (attemptId, settle) => send("effect.settle", { ...settle }, attemptId),
    processRegister: (pid) => send("runner.progress", { operation: "process.register", pid }),
    processUnregister: (pid) => send("runner.progress", { operation: "process.unregister", pid }),
  };
}
