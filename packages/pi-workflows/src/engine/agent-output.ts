// Turning an agent's reply text into a node output.

/** Parse a JSON submission, tolerating a fenced block or prose around one object/array. */
export function parseAgentJson(text: string): unknown {
  const trimmed = text.trim();
  const attempts = [trimmed];
  const fenced = /```(?:json)?\s*\n([\s\S]*?)```/.exec(trimmed);
  if (fenced?.[1]) attempts.push(fenced[1].trim());
  const firstObject = trimmed.search(/[[{]/);
  if (firstObject >= 0) {
    const close = trimmed[firstObject] === "{" ? "}" : "]";
    const last = trimmed.lastIndexOf(close);
    if (last > firstObject) attempts.push(trimmed.slice(firstObject, last + 1));
  }
  for (const candidate of attempts) {
    try {
      return JSON.parse(candidate);
    } catch {
      // try the next reading
    }
  }
  throw new Error("the agent reply is not JSON");
}

/** The prompt and contract of a decision node. */
export function decisionPrompt(question: string, choices: readonly string[], field: string): { prompt: string; expectedOutput: string } {
  const options = choices.map((choice) => JSON.stringify(choice)).join(" | ");
  return {
    prompt: `${question}\n\nAnswer with exactly one of: ${choices.join(", ")}.`,
    expectedOutput: `{ ${JSON.stringify(field)}: ${options} }`,
  };
}

export function checkDecision(output: unknown, choices: readonly string[], field: string): unknown {
  const value = (output as Record<string, unknown> | null)?.[field];
  if (typeof value !== "string" || !choices.includes(value)) {
    throw new Error(`the answer must set "${field}" to one of: ${choices.join(", ")}`);
  }
  return output;
}
