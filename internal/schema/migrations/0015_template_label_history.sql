-- Template label history (internal/templatestore owns the queries).
--
-- Why a label moved: the operator's reason, or what moved it along with
-- another label ('' = not said). Where it moved from is the previous change
-- of the same label, found by postline_template_label_changes_name_idx.
ALTER TABLE postline_template_label_changes ADD COLUMN reason text NOT NULL DEFAULT '';

-- Points the active label of p_name at p_version and, unless
-- p_keep_fallback, the fallback label at the version active pointed at
-- before (the last known good one), in one transaction. It takes the label
-- revision's row lock before it reads the labels; each statement of a
-- plpgsql function reads a fresh snapshot, so concurrent activations of one
-- template are applied one after the other, each on what the one before
-- left, and revisions grow in commit order as with every label change.
--
-- Returns one row per label it moved, fallback first: the label, the version
-- it pointed at before (NULL: it was not set), the version it points at now,
-- and the change's revision, time and author. When p_version does not exist
-- it returns one row with r_exists false; when active already points at it,
-- one row with r_moved false that describes the active label as it is.
CREATE FUNCTION postline_template_activate(
	p_name text, p_version integer, p_keep_fallback boolean, p_by text, p_reason text, p_fallback_reason text
) RETURNS TABLE (
	r_exists boolean, r_moved boolean, r_label text, r_from integer, r_to integer,
	r_revision bigint, r_at timestamptz, r_by text
) LANGUAGE plpgsql AS $$
DECLARE
	v_rev      bigint;
	v_at       timestamptz;
	v_active   integer;
	v_fallback integer;
BEGIN
	SELECT rv.revision INTO v_rev FROM postline_template_label_revision rv FOR UPDATE;
	IF NOT EXISTS (SELECT 1 FROM postline_template_versions v WHERE v.name = p_name AND v.version = p_version) THEN
		RETURN QUERY SELECT false, false, NULL::text, NULL::integer, NULL::integer, NULL::bigint, NULL::timestamptz, NULL::text;
		RETURN;
	END IF;
	SELECT l.version INTO v_active FROM postline_template_labels l WHERE l.name = p_name AND l.label = 'active';
	SELECT l.version INTO v_fallback FROM postline_template_labels l WHERE l.name = p_name AND l.label = 'fallback';
	IF v_active = p_version THEN
		RETURN QUERY SELECT true, false, l.label::text, l.version, l.version, l.revision, l.updated_at, l.updated_by
			FROM postline_template_labels l WHERE l.name = p_name AND l.label = 'active';
		RETURN;
	END IF;

	v_at := clock_timestamp();
	IF NOT p_keep_fallback AND v_active IS NOT NULL AND v_active IS DISTINCT FROM v_fallback THEN
		v_rev := v_rev + 1;
		INSERT INTO postline_template_labels AS l (name, label, version, percent, revision, updated_at, updated_by)
		VALUES (p_name, 'fallback', v_active, NULL, v_rev, v_at, p_by)
		ON CONFLICT (name, label) DO UPDATE SET version = EXCLUDED.version, percent = NULL,
			revision = EXCLUDED.revision, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by;
		INSERT INTO postline_template_label_changes (revision, name, label, version, percent, changed_at, changed_by, reason)
		VALUES (v_rev, p_name, 'fallback', v_active, NULL, v_at, p_by, p_fallback_reason);
		RETURN QUERY SELECT true, true, 'fallback'::text, v_fallback, v_active, v_rev, v_at, p_by;
	END IF;

	v_rev := v_rev + 1;
	INSERT INTO postline_template_labels AS l (name, label, version, percent, revision, updated_at, updated_by)
	VALUES (p_name, 'active', p_version, NULL, v_rev, v_at, p_by)
	ON CONFLICT (name, label) DO UPDATE SET version = EXCLUDED.version, percent = NULL,
		revision = EXCLUDED.revision, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by;
	INSERT INTO postline_template_label_changes (revision, name, label, version, percent, changed_at, changed_by, reason)
	VALUES (v_rev, p_name, 'active', p_version, NULL, v_at, p_by, p_reason);
	UPDATE postline_template_label_revision SET revision = v_rev, updated_at = v_at;
	RETURN QUERY SELECT true, true, 'active'::text, v_active, p_version, v_rev, v_at, p_by;
END;
$$;
