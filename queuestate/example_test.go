package queuestate_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/scorerefresh/scorerefresh/queuestate"
)

// One reading of the queue and its dead letters: four round trips whatever
// they hold.
func ExampleReader_Read() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	db := client.Database("scorerefresh")
	r := queuestate.New(db.Collection("score_events"), db.Collection("score_events_dead"))
	st, err := r.Read(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("depth %d, oldest %.1fs, dead letters %d\n", st.Depth, st.OldestAge(time.Now()).Seconds(), st.DeadLetters)
}
