// Validates Prometheus Operator objects (monitoring.coreos.com/v1) rendered by the chart against
// the operator's CRD schemas, as packaged by @kubernetes-models/prometheus-operator. Usage:
//   node validate-monitoring.mjs <models dir> <file.json>   (a JSON array of objects)
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [modelsDir, file] = process.argv.slice(2);
const entry = join(modelsDir, "node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js");
const v1 = await import(pathToFileURL(entry).href);
let failed = 0;
for (const obj of JSON.parse(readFileSync(file, "utf8"))) {
  const Kind = v1[obj.kind];
  if (obj.apiVersion !== "monitoring.coreos.com/v1" || !Kind) {
    console.error(`unknown monitoring kind ${obj.apiVersion} ${obj.kind}`);
    failed++;
    continue;
  }
  try {
    new Kind(obj).validate();
  } catch (e) {
    console.error(`${obj.kind} ${obj.metadata?.name}: ${e.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
