-- The task whose turn ended the workflow (its agent completed it): that
-- task owes the owner the answer, even when it is a continuation.
ALTER TABLE workflows ADD COLUMN ended_by_task TEXT;
