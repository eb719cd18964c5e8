// Evaluates a batch of IAM requests with @cloud-copilot/iam-simulate (identity, resource and KMS key
// policies together). Input on stdin: a JSON array of iam-simulate `Simulation` objects. Output on stdout:
// a JSON array, one entry per simulation in the same order:
//   {"result": "Allowed" | "ExplicitlyDenied" | "ImplicitlyDenied" | null, "errors": ..., "ignoredContextKeys": [...]}
// One process per batch: Node's start-up and iam-data's loading cost far more than a simulation.
import { runSimulation } from '@cloud-copilot/iam-simulate'

async function readStdin() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return Buffer.concat(chunks).toString('utf8')
}

const simulations = JSON.parse(await readStdin())
const results = []
for (const simulation of simulations) {
  // Strict mode: evaluate the request exactly as given, never "allowed if some unknown key matched".
  const response = await runSimulation(simulation, { simulationMode: 'Strict' })
  if (response.resultType === 'error') {
    results.push({ result: null, errors: response.errors, ignoredContextKeys: [] })
  } else if (response.resultType === 'single') {
    results.push({
      result: response.overallResult,
      errors: null,
      ignoredContextKeys: response.result.ignoredContextKeys ?? []
    })
  } else {
    // A wildcard in the request's resource: every scenario names one concrete resource, so this is a
    // mistake in the scenario, reported as an error rather than evaluated as a pattern.
    results.push({ result: null, errors: { message: 'wildcard.resource.in.request' }, ignoredContextKeys: [] })
  }
}
process.stdout.write(JSON.stringify(results))
