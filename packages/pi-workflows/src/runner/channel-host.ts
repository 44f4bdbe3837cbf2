// The engine's Host implemented over the runner channel: one method, one message kind.
import type { EffectReservation, Host } from "../engine/host.js";
import { VALUE_BYTES_MAX } from "../engine/limits.js";
import type { RunnerSession } from "./session.js";

export function channelHost(session: RunnerSession): Host {
  const send = async (kind: string, payload: Record<string, unknown>, attemptId?: string) => {
    await session.send(kind, payload, attemptId);
  };
  return {
    nodeStarted: (attemptId, start) => send("node.started", { ...start }, attemptId),
    // Progress and the results of pure nodes started here go ahead without waiting: nothing
    // the engine does next depends on their answers (an uncommitted pure node reruns).
    nodeUpdate: (attemptId, update) => session.sendAhead("node.update", { ...update }, attemptId),
    // A pure node's result joins the others of its tick in one `nodes.finished` message.
    nodeFinished: (attemptId, { output, start, outputBytes }) =>
      start?.nodeType === "compute"
        ? session.sendPureResult({ ...start, attemptId, outcome: "completed", value: output }, outputBytes ?? VALUE_BYTES_MAX)
        : send("node.finished", { ...start, output }, attemptId),
    nodeFailed: (attemptId, { error, start }) =>
      start?.nodeType === "compute"
        ? session.sendPureResult({ ...start, attemptId, outcome: "failed", value: error }, Buffer.byteLength(JSON.stringify(error), "utf8"))
        : send("node.failed", { ...start, error }, attemptId),
    // The run's end goes out behind the results still in flight (their last burst and the
    // end share one commit), and the runner still waits for every answer before it goes on.
    runFinished: async (result) => {
      await session.sendAhead("run.finished", { ...result });
      await session.flush();
    },
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
