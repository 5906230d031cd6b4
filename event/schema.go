package event

import _ "embed"

// SchemaJSON is the JSON Schema (draft 2020-12) of the event document, for
// consumers in other languages. A test checks that Event and the schema
// agree.
//
//go:embed schema/event.v1.schema.json
var SchemaJSON []byte
