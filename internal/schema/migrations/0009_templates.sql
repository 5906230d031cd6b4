-- Versioned mail templates (internal/templatestore owns the queries).
--
-- A template is a name with immutable, numbered versions and movable labels
-- (active, canary, fallback) that point at versions. Layouts are templates of
-- kind 'layout': they are versioned, labelled and rolled back the same way,
-- and a version of kind 'template' names the layout it is wrapped in (the
-- layout's labels pick the layout version, as they pick any template's).
--
-- Names are slugs: lowercase ASCII letters and digits, '-' and '_' inside,
-- 1 to 64 characters, starting and ending with a letter or digit.
CREATE TABLE postline_templates (
	name           text COLLATE "C" PRIMARY KEY
		CHECK (name ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'),
	kind           text COLLATE "C" NOT NULL DEFAULT 'template' CHECK (kind IN ('template', 'layout')),
	description    text             NOT NULL DEFAULT '',
	default_locale text COLLATE "C" NOT NULL DEFAULT '',
	created_at     timestamptz      NOT NULL DEFAULT now(),
	updated_at     timestamptz      NOT NULL DEFAULT now()
);

-- One row per pushed version; rows are never updated (the trigger below
-- refuses it). content_hash is SHA-256 over the canonical content, computed
-- by the store, so that pushing unchanged content adds no version.
CREATE TABLE postline_template_versions (
	name         text COLLATE "C" NOT NULL REFERENCES postline_templates (name) ON DELETE CASCADE,
	version      integer          NOT NULL CHECK (version > 0),
	subject      text             NOT NULL DEFAULT '',
	text_body    text             NOT NULL DEFAULT '',
	html_body    text             NOT NULL DEFAULT '',
	layout       text COLLATE "C" NOT NULL DEFAULT ''  -- name of a layout template; '' = none
		CHECK (layout = '' OR layout ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'),
	data_schema  jsonb,                                -- JSON Schema of the data; NULL = none
	locales      jsonb,                                -- per-locale overrides; NULL = none
	sample_data  jsonb,                                -- example data for previews; NULL = none
	content_hash bytea            NOT NULL CHECK (octet_length(content_hash) = 32),
	created_at   timestamptz      NOT NULL DEFAULT now(),
	created_by   text             NOT NULL DEFAULT '',
	PRIMARY KEY (name, version)
);

CREATE FUNCTION postline_template_versions_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'template version %/% is immutable: push a new version instead', OLD.name, OLD.version
		USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER postline_template_versions_immutable
	BEFORE UPDATE ON postline_template_versions
	FOR EACH ROW EXECUTE FUNCTION postline_template_versions_immutable();

-- The current labels: at most one row per (name, label). percent is the
-- share of sends (1-100) a canary gets, and is set on canary rows only.
CREATE TABLE postline_template_labels (
	name       text COLLATE "C" NOT NULL,
	label      text COLLATE "C" NOT NULL CHECK (label IN ('active', 'canary', 'fallback')),
	version    integer          NOT NULL,
	percent    smallint,
	revision   bigint           NOT NULL,          -- the label revision that set it
	updated_at timestamptz      NOT NULL,
	updated_by text             NOT NULL DEFAULT '',
	PRIMARY KEY (name, label),
	FOREIGN KEY (name, version) REFERENCES postline_template_versions (name, version) ON DELETE CASCADE,
	CHECK ((label = 'canary') = (percent IS NOT NULL)),
	CHECK (percent IS NULL OR percent BETWEEN 1 AND 100)
);

-- Every label change, in commit order of revision: what Changes reads and
-- what Rollback finds the previous active version in. version NULL = the
-- label was removed.
CREATE TABLE postline_template_label_changes (
	revision   bigint PRIMARY KEY,
	name       text COLLATE "C" NOT NULL REFERENCES postline_templates (name) ON DELETE CASCADE,
	label      text COLLATE "C" NOT NULL CHECK (label IN ('active', 'canary', 'fallback')),
	version    integer,
	percent    smallint,
	changed_at timestamptz      NOT NULL,
	changed_by text             NOT NULL DEFAULT ''
);

-- Serves Changes (since a time) and Rollback (a name's history).
CREATE INDEX postline_template_label_changes_time_idx ON postline_template_label_changes (changed_at);
CREATE INDEX postline_template_label_changes_name_idx ON postline_template_label_changes (name, label, revision);

-- One row: the label revision, bumped by every label change in the
-- statement that makes it. The row lock orders concurrent changes, so
-- revisions grow in commit order and a reader that saw revision N has seen
-- every change up to N: the one-row check watchers poll.
CREATE TABLE postline_template_label_revision (
	only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
	revision   bigint      NOT NULL,
	updated_at timestamptz NOT NULL
);
INSERT INTO postline_template_label_revision (revision, updated_at) VALUES (0, now());

-- Adds a version of a template unless its content hash equals the latest
-- version's: one call, so a push is one round trip. It locks the template's
-- row first (creating it if needed); each statement of a plpgsql function
-- then reads a fresh snapshot, so concurrent pushes of the same content
-- create one version. Returns the latest version and whether it was created.
CREATE FUNCTION postline_template_push(
	p_name text, p_kind text, p_description text, p_default_locale text,
	p_subject text, p_text_body text, p_html_body text, p_layout text,
	p_data_schema jsonb, p_locales jsonb, p_sample_data jsonb,
	p_content_hash bytea, p_created_by text,
	OUT version integer, OUT created boolean, OUT kind text
) LANGUAGE plpgsql AS $$
DECLARE
	v_latest integer;
	v_hash   bytea;
BEGIN
	INSERT INTO postline_templates AS t (name, kind, description, default_locale)
	VALUES (p_name, p_kind, p_description, p_default_locale)
	ON CONFLICT (name) DO UPDATE
		SET description = EXCLUDED.description,
		    default_locale = EXCLUDED.default_locale,
		    updated_at = CASE WHEN (t.description, t.default_locale) IS DISTINCT FROM
		                           (EXCLUDED.description, EXCLUDED.default_locale)
		                      THEN now() ELSE t.updated_at END
		WHERE t.kind = EXCLUDED.kind
	RETURNING t.kind INTO kind;
	IF kind IS NULL THEN
		SELECT t.kind INTO kind FROM postline_templates t WHERE t.name = p_name;
		version := NULL;
		created := false;
		RETURN; -- kind mismatch: the caller reports it
	END IF;

	SELECT v.version, v.content_hash INTO v_latest, v_hash
	FROM postline_template_versions v WHERE v.name = p_name
	ORDER BY v.version DESC LIMIT 1;
	IF v_hash = p_content_hash THEN
		version := v_latest;
		created := false;
		RETURN;
	END IF;

	version := coalesce(v_latest, 0) + 1;
	INSERT INTO postline_template_versions AS v (name, version, subject, text_body, html_body, layout,
		data_schema, locales, sample_data, content_hash, created_by)
	VALUES (p_name, version, p_subject, p_text_body, p_html_body, p_layout,
		p_data_schema, p_locales, p_sample_data, p_content_hash, p_created_by);
	UPDATE postline_templates t SET updated_at = now() WHERE t.name = p_name;
	created := true;
END;
$$;
