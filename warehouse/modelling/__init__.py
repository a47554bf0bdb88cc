"""Modelling: the SQL-model runner, the statistics behind verdicts, the UDFs they call."""
