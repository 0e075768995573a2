"""Reading answers out of model responses: tags, final-answer phrases, letters, numbers, JSON."""
