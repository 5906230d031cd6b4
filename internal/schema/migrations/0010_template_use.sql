-- Which template version rendered a template job, and why that one
-- (active, canary, requested, or the fallback after what failed): written
-- with the outcome of the attempt that rendered it. NULL for jobs that
-- carried their own bodies.
ALTER TABLE postline_messages
	ADD COLUMN template         text,
	ADD COLUMN template_version integer,
	ADD COLUMN template_why     text;
