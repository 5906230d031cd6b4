package job

import _ "embed"

// SchemaJSON is the JSON Schema (draft 2020-12) of the version 1 job
// document, for producers in other languages. It describes the same
// document as Job; Decode is authoritative where the schema cannot express
// a rule (address syntax, the header allow-list, configurable limits).
//
//go:embed schema/job.v1.schema.json
var SchemaJSON []byte
