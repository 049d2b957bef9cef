-- The runtime's handle on the pending request an approval answers (not secret).
ALTER TABLE approvals ADD COLUMN request_key TEXT;
CREATE INDEX approvals_status ON approvals (status);
