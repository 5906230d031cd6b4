// Package templatestore owns the PostgreSQL rows of versioned mail templates:
// postline_templates (one row per name), postline_template_versions
// (immutable, numbered content), postline_template_labels (active, canary and
// fallback pointers at versions) and the history of label changes.
//
// [Store.Push] adds a version only when its content hash (SHA-256 over the
// canonical content, see [ContentHash]) differs from the latest version's, so
// pushing an unchanged directory again adds nothing; concurrent pushes of the
// same content create one version. Versions are never updated: the store has
// no path for it and a trigger refuses an UPDATE made in SQL.
//
// Labels move with [Store.SetLabel], [Store.SetFallback], [Store.ClearLabel],
// [Store.Rollback] and [Store.Activate], which also keeps the version active
// before as the fallback (the last known good one), in the same
// transaction. Every change bumps one label revision in the statement that
// makes it; revisions grow in commit order, so [Store.LabelsVersion] is a
// cheap one-row check of whether anything changed. A [Watcher] polls it and
// keeps an in-memory [Snapshot] of all labels for the sending path. Every
// change is kept: [Store.History] lists a template's, each with the version
// the label left, who moved it and why.
//
// Layouts are templates of kind layout: versioned, labelled and rolled back
// like any template. A template version names its layout; which layout
// version wraps it is the layout's labels' business.
//
// The package stores content, it does not parse or render it: data schemas,
// locales and sample data are opaque JSON here. Every method is one round
// trip to the database. The tables are created by package schema's
// migrations, in the connection's current schema.
package templatestore
