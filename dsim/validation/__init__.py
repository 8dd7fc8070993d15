"""The validation study (`dsim validate`): the simulator's predictions against real-model runs."""
